"use strict";
/*
 * The chart README's values table, generated from values.yaml (defaults) and
 * values.schema.json (descriptions), between the markers
 *   <!-- values-table:start --> and <!-- values-table:end -->.
 * Usage: node values-table.cjs CHART_DIR          exit 1 when the README's table is stale
 *        node values-table.cjs CHART_DIR --write  rewrite the table in the README
 */
const fs = require("fs");
const path = require("path");
const { npmRequire } = require("./lib.cjs");

const [chart, mode] = process.argv.slice(2);
const YAML = npmRequire("yaml");
const values = YAML.parse(fs.readFileSync(path.join(chart, "values.yaml"), "utf8"));
const schema = JSON.parse(fs.readFileSync(path.join(chart, "values.schema.json"), "utf8"));

const rows = [];
function walk(v, s, p) {
    const documentedLeaf = s && s.description && !(s.properties && Object.keys(s.properties).length);
    if (v !== null && typeof v === "object" && !Array.isArray(v) && s && s.properties && !documentedLeaf) {
        for (const [k, sub] of Object.entries(v)) {
            walk(sub, s.properties[k], p ? `${p}.${k}` : k);
        }
        return;
    }
    let def = JSON.stringify(v);
    if (def.length > 60) def = def.slice(0, 57) + "...";
    const desc = ((s && s.description) || "").replace(/\|/g, "\\|");
    rows.push(`| \`${p}\` | \`${def.replace(/\|/g, "\\|")}\` | ${desc} |`);
}
walk(values, schema, "");
const table = ["| Value | Default | Description |", "| --- | --- | --- |", ...rows].join("\n");

const readme = path.join(chart, "README.md");
const text = fs.readFileSync(readme, "utf8");
const re = /(<!-- values-table:start -->\n)[\s\S]*?(<!-- values-table:end -->)/;
if (!re.test(text)) {
    console.error(`FAIL ${readme}: no values-table markers`);
    process.exit(1);
}
const next = text.replace(re, `$1${table}\n$2`);
if (mode === "--write") {
    fs.writeFileSync(readme, next);
    console.log(`${rows.length} values written`);
} else if (next !== text) {
    console.error(`FAIL ${readme}: the values table is stale; run: node tests/deploy/values-table.cjs ${chart} --write`);
    process.exit(1);
} else {
    console.log(`${rows.length} values documented`);
}
