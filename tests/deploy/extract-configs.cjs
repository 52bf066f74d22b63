"use strict";
/*
 * Writes the service configurations of rendered ConfigMaps (router.yaml, spend.yaml) into a
 * directory, and for each one a NAME.env file listing the os.environ/NAME references it makes
 * with a placeholder value of the right shape, so the real binaries can `--check` them.
 * Usage: node extract-configs.cjs RENDERED.yaml OUTDIR
 */
const fs = require("fs");
const path = require("path");
const { npmRequire } = require("./lib.cjs");

const [file, outDir] = process.argv.slice(2);
const YAML = npmRequire("yaml");
fs.mkdirSync(outDir, { recursive: true });

/* A value of the shape the configuration expects of each reference. */
function placeholder(name) {
    if (/WEBHOOK/.test(name)) return `https://hooks.slack.invalid/services/T000/B000/${name.toLowerCase()}`;
    if (/DATABASE|POSTGRES|DSN/.test(name)) return "postgresql://tollgate@127.0.0.1:5432/tollgate";
    if (/REDIS/.test(name)) return "redis://127.0.0.1:6379/0";
    return `sk-placeholder-${name.toLowerCase().replace(/_/g, "-")}-0123456789`;
}

let n = 0;
for (const doc of YAML.parseAllDocuments(fs.readFileSync(file, "utf8"))) {
    const obj = doc.toJS();
    if (!obj || obj.kind !== "ConfigMap" || !obj.data) continue;
    for (const [key, text] of Object.entries(obj.data)) {
        if (key !== "router.yaml" && key !== "spend.yaml") continue;
        fs.writeFileSync(path.join(outDir, key), text);
        const refs = [...new Set([...text.matchAll(/os\.environ\/([A-Za-z_][A-Za-z0-9_]*)/g)].map((m) => m[1]))];
        fs.writeFileSync(path.join(outDir, key.replace(/\.yaml$/, ".env")),
            refs.map((r) => `${r}=${placeholder(r)}\n`).join(""));
        n++;
    }
}
console.log(`${n} configurations`);
