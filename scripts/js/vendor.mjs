// @ts-check
// Vendoring: copies the page's libraries (marked, DOMPurify) from node_modules, as npm installed
// them from the registry by package-lock.json, into app/api/page/vendor/ with their licenses.
//
//   node scripts/js/vendor.mjs          copy the locked versions
//   node scripts/js/vendor.mjs --check  fail if the vendored files differ (scripts/dev lint)
//   scripts/dev vendor                  update the lock to the newest versions, then copy them
//
// The page loads them as ES modules from its own host (no CDN, no build step); the .d.ts files
// beside them give `tsc --checkJs` their types.

import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const modules = join(here, "node_modules");
const vendor = join(here, "..", "..", "app", "api", "page", "vendor");

/** @type {Record<string, Record<string, string>>} package -> its file -> the vendored name */
const FILES = {
  marked: {
    "lib/marked.esm.js": "marked.esm.js",
    "lib/marked.d.ts": "marked.esm.d.ts",
    LICENSE: "marked.LICENSE",
  },
  dompurify: {
    // .js, not .mjs: every Python's mimetypes serves .js as JavaScript, which a module needs.
    "dist/purify.es.mjs": "purify.es.js",
    "dist/purify.es.d.mts": "purify.es.d.ts",
    LICENSE: "dompurify.LICENSE",
    "LICENSE-MPL": "dompurify.LICENSE-MPL",
  },
};

/** @type {Map<string, Buffer>} the vendored name -> its content */
const wanted = new Map();
const versions = [];
for (const [name, files] of Object.entries(FILES)) {
  const root = join(modules, name);
  const { version } = JSON.parse(readFileSync(join(root, "package.json"), "utf8"));
  versions.push(`${name} ${version}`);
  for (const [from, to] of Object.entries(files)) wanted.set(to, readFileSync(join(root, from)));
}
const stamp = `${versions.join("\n")}\n(copied from npm by scripts/js/vendor.mjs; do not edit)\n`;
wanted.set("VERSIONS", Buffer.from(stamp));

if (process.argv.includes("--check")) {
  const present = readdirSync(vendor).sort();
  const stale = [...wanted].flatMap(([name, content]) =>
    present.includes(name) && readFileSync(join(vendor, name)).equals(content) ? [] : [name],
  );
  const extra = present.filter((name) => !wanted.has(name));
  if (stale.length || extra.length) {
    console.error(
      `app/api/page/vendor/ is not ${versions.join(", ")} from the lockfile: ` +
        `${[...stale, ...extra].join(", ")} (run node scripts/js/vendor.mjs)`,
    );
    process.exit(1);
  }
} else {
  rmSync(vendor, { recursive: true, force: true });
  mkdirSync(vendor, { recursive: true });
  for (const [name, content] of wanted) writeFileSync(join(vendor, name), content);
  console.log(`vendored ${versions.join(", ")} into ${vendor}`);
}
