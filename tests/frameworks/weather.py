"""What every framework driver gives its agent: one tool and the structured answer's type. Each
driver wraps the tool in its framework's own way; it runs in the framework's environment, with
this folder on its path (a script's own folder)."""

from pydantic import BaseModel


class Forecast(BaseModel):
    city: str
    rain: bool


def get_weather(city: str) -> str:
    """The weather in a city."""
    return f"Rain all day in {city}."
