"use strict";
/*
 * Checks the Grafana dashboard: valid JSON, unique panel ids, no overlapping panels, every
 * Prometheus query parses and uses only the services' metrics and labels, every metric the
 * issue asks for is on a panel, and the spend panels query spend_logs in USD.
 * Usage: node check-dashboard.cjs DASHBOARD.json METRICS.txt
 */
const fs = require("fs");
const { loadMetrics, expandGrafanaVars, checkPromql } = require("./lib.cjs");

const [file, metricsFile] = process.argv.slice(2);
const problems = [];
let dash;
try {
    dash = JSON.parse(fs.readFileSync(file, "utf8"));
} catch (e) {
    console.error(`FAIL ${file}: not valid JSON: ${e.message}`);
    process.exit(1);
}
const catalogue = loadMetrics(metricsFile);

for (const key of ["title", "uid", "panels", "templating", "schemaVersion"]) {
    if (!(key in dash)) {
        problems.push(`dashboard has no "${key}"`);
    }
}
const vars = new Set((dash.templating && dash.templating.list || []).map((v) => v.name));

const ids = new Set();
const cells = new Map();
const used = new Set();
let promQueries = 0;
let sqlQueries = 0;
for (const p of dash.panels || []) {
    const where = `panel ${p.id} "${p.title}"`;
    if (ids.has(p.id)) {
        problems.push(`${where}: duplicate id`);
    }
    ids.add(p.id);
    const g = p.gridPos;
    if (!g || g.w < 1 || g.x < 0 || g.x + g.w > 24 || g.h < 1) {
        problems.push(`${where}: gridPos missing or outside the 24 columns`);
        continue;
    }
    for (let y = g.y; y < g.y + g.h; y++) {
        for (let x = g.x; x < g.x + g.w; x++) {
            const k = `${x},${y}`;
            if (cells.has(k)) {
                problems.push(`${where}: overlaps panel ${cells.get(k)}`);
                y = g.y + g.h;
                break;
            }
            cells.set(k, p.id);
        }
    }
    if (p.type === "row") {
        continue;
    }
    if (!p.title || !p.description) {
        problems.push(`${where}: needs a title and a description`);
    }
    const ds = p.datasource || {};
    const dsVar = (ds.uid || "").replace(/^\$\{?|\}?$/g, "");
    if (!vars.has(dsVar)) {
        problems.push(`${where}: datasource uid ${ds.uid} is not a dashboard variable`);
    }
    if (!p.targets || p.targets.length === 0) {
        problems.push(`${where}: no query`);
        continue;
    }
    for (const t of p.targets) {
        if (ds.type === "prometheus") {
            promQueries++;
            const legend = [...(t.legendFormat || "").matchAll(/\{\{\s*(\w+)\s*\}\}/g)].map((m) => m[1]);
            const r = checkPromql(`${where} ${t.refId}`, expandGrafanaVars(t.expr || ""), catalogue, legend);
            problems.push(...r.problems);
            for (const m of r.metrics) {
                used.add(m.replace(/_(bucket|sum|count)$/, ""));
            }
            if (/histogram_quantile/.test(t.expr) && !/_bucket\b/.test(t.expr)) {
                problems.push(`${where} ${t.refId}: histogram_quantile over something other than _bucket`);
            }
            if (/\brate\(|\bincrease\(/.test(t.expr) && !/\$__rate_interval/.test(t.expr)) {
                problems.push(`${where} ${t.refId}: rate()/increase() should use $__rate_interval`);
            }
        } else if (ds.type === "grafana-postgresql-datasource") {
            sqlQueries++;
            const sql = t.rawSql || "";
            /* Grafana expands the macros to int4 literals: * 1000 overflows without the cast. */
            for (const need of ["spend_logs", "ts_end_ms", "cost_nusd", "/ 1e9", "$__unixEpochFrom()::bigint", "$__unixEpochTo()::bigint"]) {
                if (!sql.includes(need)) {
                    problems.push(`${where}: SQL does not use ${need}`);
                }
            }
            const cols = [...sql.matchAll(/\b(?:s\.)?(key_hash|team_id|model_group|ts_end_ms|cost_nusd)\b/g)].length;
            if (cols === 0) {
                problems.push(`${where}: SQL names no spend_logs column`);
            }
            if (!/AS\s+"time"/.test(sql) || !/AS\s+metric/.test(sql)) {
                problems.push(`${where}: SQL must return "time" and metric columns for a time series`);
            }
        } else {
            problems.push(`${where}: unexpected datasource type ${ds.type}`);
        }
    }
}

/* What the dashboard must show (issue: deploy). */
const required = [
    "tollgate_router_requests_total", "tollgate_router_fallbacks_total", "tollgate_router_retries_total",
    "tollgate_router_request_duration_seconds", "tollgate_router_overhead_seconds",
    "tollgate_router_cooldowns_total", "tollgate_router_spool_bytes",
    "tollgate_router_spool_oldest_unacked_seconds", "tollgate_spend_consumer_lag",
    "tollgate_spend_alerts_total",
];
for (const m of required) {
    if (!used.has(m)) {
        problems.push(`no panel shows ${m}`);
    }
}
for (const t of ["key_hash", "team_id", "model_group"]) {
    const found = (dash.panels || []).some((p) => (p.targets || []).some((q) => (q.rawSql || "").includes(`top.g = s.${t}`)));
    if (!found) {
        problems.push(`no spend-per-hour panel grouped by ${t}`);
    }
}
if (!(dash.panels || []).some((p) => (p.targets || []).some((q) => /outcome="suppressed"/.test(q.expr || "")))) {
    problems.push("no panel shows suppressed alerts");
}

if (problems.length) {
    for (const p of problems) {
        console.error(`FAIL ${file}: ${p}`);
    }
    process.exit(1);
}
console.log(`ok ${file}: ${ids.size} panels, ${promQueries} PromQL queries, ${sqlQueries} SQL queries, ${used.size} metrics`);
