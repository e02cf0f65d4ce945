"""What an operator sees of the product: metrics (`metrics`, Prometheus, multiprocess-safe) and
the worker host's own HTTP endpoint for them and its liveness (`exposition`)."""

#: prometheus_client's multiprocess directory: it must be set before `metrics` is first imported.
MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
