"use strict";
/*
 * Shared helpers of the deploy checks: module loading from the pinned npm tree, the metric
 * catalogue (metrics.txt) and PromQL inspection with the Prometheus project's own grammar.
 */
const fs = require("fs");
const path = require("path");
const { createRequire } = require("module");

/* require() that resolves from the npm tree installed by check.sh (TG_DEPLOY_NPM_DIR). */
function npmRequire(name) {
    const dir = process.env.TG_DEPLOY_NPM_DIR;
    if (!dir) {
        throw new Error("TG_DEPLOY_NPM_DIR is not set (run through tests/deploy/check.sh)");
    }
    return createRequire(path.join(dir, "package.json"))(name);
}

/* metrics.txt: "name type label..." per line; histograms expose _bucket (le), _sum, _count. */
function loadMetrics(file) {
    const metrics = new Map();
    for (const raw of fs.readFileSync(file, "utf8").split("\n")) {
        const line = raw.replace(/#.*/, "").trim();
        if (!line) {
            continue;
        }
        const [name, type, ...labels] = line.split(/\s+/);
        if (type === "histogram") {
            metrics.set(name + "_bucket", { type, labels: new Set([...labels, "le"]) });
            metrics.set(name + "_sum", { type, labels: new Set(labels) });
            metrics.set(name + "_count", { type, labels: new Set(labels) });
        } else if (type === "counter" || type === "gauge") {
            metrics.set(name, { type, labels: new Set(labels) });
        } else {
            throw new Error(`${file}: ${name}: unknown metric type ${type}`);
        }
    }
    return metrics;
}

/* Labels the scrape adds to every series (Prometheus Operator / Kubernetes discovery). */
const TARGET_LABELS = new Set(["namespace", "pod", "job", "instance", "container", "service", "endpoint"]);

/* Grafana variables replaced by a literal before parsing. */
function expandGrafanaVars(expr) {
    return expr
        .replace(/\$__rate_interval|\$__interval|\$__range/g, "5m")
        .replace(/\$\{?(\w+)\}?/g, (m, v) => v);
}

/*
 * Parse one PromQL expression; returns {errors[], metrics[], labels[]} where metrics are the
 * names of every vector selector and labels every label name the expression mentions
 * (matchers, by/without, on/ignoring, label_replace targets are not included).
 */
function inspectPromql(expr) {
    const { parser } = npmRequire("@prometheus-io/lezer-promql");
    const tree = parser.parse(expr);
    const errors = [];
    const metrics = [];
    const labels = [];
    tree.iterate({
        enter(node) {
            if (node.type.isError) {
                errors.push(`syntax error at offset ${node.from}: "${expr.slice(Math.max(0, node.from - 20), node.from + 20)}"`);
            }
            const text = expr.slice(node.from, node.to);
            if (node.name === "Identifier" && node.node.parent && node.node.parent.name === "VectorSelector") {
                metrics.push(text);
            }
            if (node.name === "LabelName") {
                labels.push(text);
            }
        },
    });
    return { errors, metrics, labels };
}

/*
 * Check one expression against the catalogue; returns a list of problems. legendLabels are
 * the {{label}} names of a Grafana legend or alert annotation, which must be available too.
 */
function checkPromql(where, expr, catalogue, legendLabels = []) {
    const problems = [];
    const r = inspectPromql(expr);
    for (const e of r.errors) {
        problems.push(`${where}: ${e} in: ${expr}`);
    }
    if (r.metrics.length === 0) {
        problems.push(`${where}: no metric in: ${expr}`);
    }
    const known = new Set(TARGET_LABELS);
    for (const m of r.metrics) {
        const entry = catalogue.get(m);
        if (!entry) {
            problems.push(`${where}: metric ${m} is not one of the services' metrics (tests/deploy/metrics.txt)`);
            continue;
        }
        for (const l of entry.labels) {
            known.add(l);
        }
    }
    for (const l of [...r.labels, ...legendLabels]) {
        if (!known.has(l)) {
            problems.push(`${where}: label "${l}" is not a label of ${r.metrics.join(", ")}`);
        }
    }
    return { problems, metrics: r.metrics };
}

module.exports = { npmRequire, loadMetrics, expandGrafanaVars, inspectPromql, checkPromql, TARGET_LABELS };
