"use strict";
/*
 * Validates `helm template` output:
 *  - every document parses as YAML (duplicate keys are errors);
 *  - built-in kinds pass kubernetes-models' schema validate() AND a strict field check (any
 *    field the Kubernetes type does not define is an error: validate() alone lets typos pass);
 *  - CRDs (ServiceMonitor, PrometheusRule, ScaledObject) get structural checks;
 *  - chart invariants: security context on every container, liveness never on a dependency
 *    path, checksum/config on workloads, selectors and references resolve, the rendered service
 *    configurations are consistent with the pod (ports, spool mount, grace period);
 *  - PromQL of alert rules parses and uses only the services' metrics and labels.
 * Usage: node validate-manifests.cjs RENDERED.yaml METRICS.txt
 * Prints a summary line ("ok FILE: ...") or FAIL lines and exits 1.
 */
const fs = require("fs");
const path = require("path");
const { npmRequire, loadMetrics, checkPromql } = require("./lib.cjs");

const [file, metricsFile] = process.argv.slice(2);
const YAML = npmRequire("yaml");
const catalogue = loadMetrics(metricsFile);
const problems = [];
const fail = (where, msg) => problems.push(`${where}: ${msg}`);

/* ---- strict field check from kubernetes-models' TypeScript declarations ----------------- */
const modelsDir = path.dirname(require.resolve("kubernetes-models/package.json", {
    paths: [process.env.TG_DEPLOY_NPM_DIR],
}));
const nmDir = path.dirname(modelsDir);
const typeCache = new Map();

function resolveImport(fromFile, spec) {
    let base = spec.startsWith(".") ? path.resolve(path.dirname(fromFile), spec) : path.join(nmDir, spec);
    for (const cand of [base + ".d.ts", path.join(base, "index.d.ts")]) {
        if (fs.existsSync(cand)) {
            return cand;
        }
    }
    return null;
}

/* Split "a; b; {c; d}; e" at top-level semicolons. */
function splitMembers(body) {
    const out = [];
    let depth = 0;
    let cur = "";
    for (const ch of body) {
        if (ch === "{" || ch === "<" || ch === "(" || ch === "[") depth++;
        if (ch === "}" || ch === ">" || ch === ")" || ch === "]") depth--;
        if (ch === ";" && depth === 0) {
            out.push(cur.trim());
            cur = "";
        } else {
            cur += ch;
        }
    }
    if (cur.trim()) out.push(cur.trim());
    return out;
}

/* Parse a type expression into {kind: leaf|array|map|ref, of, file, name}. */
function parseTypeExpr(t, imports) {
    t = t.trim();
    let m = /^Array<([\s\S]*)>$/.exec(t);
    if (m) return { kind: "array", of: parseTypeExpr(m[1], imports) };
    m = /^\{\s*\[key: string\]:\s*([\s\S]*?);?\s*\}$/.exec(t);
    if (m) return { kind: "map", of: parseTypeExpr(m[1], imports) };
    if (imports.has(t)) return { kind: "ref", file: imports.get(t), name: t };
    return { kind: "leaf" };
}

/* Load the interface declared in a .d.ts file: Map field -> type, or null for an alias. */
function loadType(file) {
    if (typeCache.has(file)) return typeCache.get(file);
    typeCache.set(file, null);
    const src = fs.readFileSync(file, "utf8").replace(/\/\*[\s\S]*?\*\//g, "");
    const imports = new Map();
    for (const m of src.matchAll(/import \{ ([^}]+) \} from "([^"]+)";/g)) {
        const target = resolveImport(file, m[2]);
        for (const name of m[1].split(",").map((s) => s.trim())) {
            if (target) imports.set(name, target);
        }
    }
    const start = /export interface \w+(?: extends [\w, ]+)? \{/.exec(src);
    if (!start) return null;
    let i = start.index + start[0].length;
    let depth = 1;
    let j = i;
    while (depth > 0 && j < src.length) {
        if (src[j] === "{") depth++;
        if (src[j] === "}") depth--;
        j++;
    }
    const fields = new Map();
    for (const member of splitMembers(src.slice(i, j - 1))) {
        const fm = /^"([^"]+)"\??:\s*([\s\S]+)$/.exec(member);
        if (fm) fields.set(fm[1], parseTypeExpr(fm[2], imports));
    }
    typeCache.set(file, fields);
    return fields;
}

function strictCheck(where, value, type, p) {
    if (value === null || value === undefined) return;
    if (type.kind === "array") {
        if (Array.isArray(value)) value.forEach((v, i) => strictCheck(where, v, type.of, `${p}[${i}]`));
        return;
    }
    if (type.kind === "map") {
        if (typeof value === "object") for (const [k, v] of Object.entries(value)) strictCheck(where, v, type.of, `${p}.${k}`);
        return;
    }
    if (type.kind !== "ref") return;
    const fields = loadType(type.file);
    if (!fields || typeof value !== "object" || Array.isArray(value)) return;
    for (const [k, v] of Object.entries(value)) {
        if (!fields.has(k)) {
            fail(where, `unknown field ${p ? p + "." : ""}${k}`);
            continue;
        }
        strictCheck(where, v, fields.get(k), p ? `${p}.${k}` : k);
    }
}

function modelFile(apiVersion, kind) {
    const dir = apiVersion === "v1" ? "v1" : apiVersion;
    const f = path.join(modelsDir, dir, `${kind}.d.ts`);
    return fs.existsSync(f) ? f : null;
}

/* ---- CRDs: structural checks ------------------------------------------------------------ */
function checkServiceMonitor(where, d) {
    const s = d.spec || {};
    if (!s.selector || !s.selector.matchLabels) fail(where, "spec.selector.matchLabels missing");
    if (!Array.isArray(s.endpoints) || s.endpoints.length === 0) fail(where, "spec.endpoints empty");
    for (const e of s.endpoints || []) {
        if (!e.port) fail(where, "endpoint without a named port");
        if (e.path !== "/metrics") fail(where, `endpoint path ${e.path} is not /metrics`);
    }
}
function checkPrometheusRule(where, d) {
    const groups = (d.spec || {}).groups;
    if (!Array.isArray(groups) || groups.length === 0) {
        fail(where, "spec.groups empty");
        return;
    }
    for (const g of groups) {
        if (!g.name || !Array.isArray(g.rules) || g.rules.length === 0) fail(where, `group ${g.name} has no rules`);
        for (const r of g.rules || []) {
            const rw = `${where} rule ${r.alert || r.record}`;
            if (!r.alert || !r.expr) fail(rw, "alert and expr are required");
            if (r.for && !/^[0-9]+(s|m|h)$/.test(r.for)) fail(rw, `bad for: ${r.for}`);
            if (!r.labels || !r.labels.severity) fail(rw, "no severity label");
            if (!r.annotations || !r.annotations.summary) fail(rw, "no summary annotation");
            const legend = [...JSON.stringify(r.annotations || {}).matchAll(/\$labels\.(\w+)/g)].map((m) => m[1]);
            const res = checkPromql(rw, r.expr || "", catalogue, legend);
            problems.push(...res.problems);
            ruleCount++;
        }
    }
}
function checkScaledObject(where, d) {
    const s = d.spec || {};
    if (!s.scaleTargetRef || !s.scaleTargetRef.name) fail(where, "spec.scaleTargetRef.name missing");
    if (!Array.isArray(s.triggers) || s.triggers.length === 0) fail(where, "spec.triggers empty");
    for (const t of s.triggers || []) {
        if (!t.type || !t.metadata) fail(where, "trigger without type/metadata");
        for (const [k, v] of Object.entries(t.metadata || {})) {
            if (typeof v !== "string") fail(where, `trigger metadata ${k} must be a string`);
        }
        if (t.type === "prometheus") {
            const res = checkPromql(`${where} trigger`, t.metadata.query || "", catalogue);
            problems.push(...res.problems);
        }
    }
    if (!(s.maxReplicaCount >= (s.minReplicaCount || 0))) fail(where, "maxReplicaCount < minReplicaCount");
}
const CRDS = {
    "monitoring.coreos.com/v1/ServiceMonitor": checkServiceMonitor,
    "monitoring.coreos.com/v1/PrometheusRule": checkPrometheusRule,
    "keda.sh/v1alpha1/ScaledObject": checkScaledObject,
};

/* ---- parse ------------------------------------------------------------------------------- */
let ruleCount = 0;
const docs = [];
const text = fs.readFileSync(file, "utf8");
for (const doc of YAML.parseAllDocuments(text, { uniqueKeys: true })) {
    for (const e of doc.errors) fail(file, `YAML error: ${e.message}`);
    for (const w of doc.warnings) fail(file, `YAML warning: ${w.message}`);
    const obj = doc.toJS();
    if (obj !== null && obj !== undefined) docs.push(obj);
}
if (docs.length === 0) fail(file, "no manifest rendered");

const byKind = new Map();
for (const d of docs) {
    const where = `${d.kind || "?"}/${(d.metadata || {}).name || "?"}`;
    if (!d.apiVersion || !d.kind || !d.metadata || !d.metadata.name) {
        fail(where, "apiVersion, kind and metadata.name are required");
        continue;
    }
    if (!byKind.has(d.kind)) byKind.set(d.kind, []);
    byKind.get(d.kind).push(d);
    const crd = CRDS[`${d.apiVersion}/${d.kind}`];
    if (crd) {
        if (!d.spec) fail(where, "spec missing");
        else crd(where, d);
        continue;
    }
    const mf = modelFile(d.apiVersion, d.kind);
    if (!mf) {
        fail(where, `${d.apiVersion} ${d.kind} is neither a Kubernetes type nor a known CRD`);
        continue;
    }
    const group = d.apiVersion === "v1" ? "v1" : d.apiVersion;
    const Model = npmRequire(`kubernetes-models/${group}`)[d.kind];
    try {
        new Model(d).validate();
    } catch (e) {
        const details = (e.errors || []).map((x) => `${x.instancePath} ${x.message}`).join("; ");
        fail(where, `schema: ${details || e.message}`);
    }
    strictCheck(where, d, { kind: "ref", file: mf }, "");
}

/* ---- chart invariants -------------------------------------------------------------------- */
const all = (k) => byKind.get(k) || [];
const find = (k, name) => all(k).find((d) => d.metadata.name === name);
const matches = (sel, labels) => Object.entries(sel || {}).every(([k, v]) => (labels || {})[k] === v);
const workloads = [...all("Deployment"), ...all("StatefulSet")];

function checkContainerSecurity(where, pod, c) {
    const sc = c.securityContext || {};
    const psc = pod.securityContext || {};
    if (sc.runAsNonRoot !== true && psc.runAsNonRoot !== true) fail(where, `${c.name}: runAsNonRoot is not true`);
    if ((sc.runAsUser ?? psc.runAsUser) === 0) fail(where, `${c.name}: runs as uid 0`);
    if (sc.readOnlyRootFilesystem !== true) fail(where, `${c.name}: readOnlyRootFilesystem is not true`);
    if (sc.allowPrivilegeEscalation !== false) fail(where, `${c.name}: allowPrivilegeEscalation is not false`);
    if (!((sc.capabilities || {}).drop || []).includes("ALL")) fail(where, `${c.name}: capabilities do not drop ALL`);
    const seccomp = (sc.seccompProfile || psc.seccompProfile || {}).type;
    if (seccomp !== "RuntimeDefault") fail(where, `${c.name}: seccompProfile is ${seccomp}, not RuntimeDefault`);
    if (!c.resources || !c.resources.requests) fail(where, `${c.name}: no resource requests`);
}

for (const w of workloads) {
    const where = `${w.kind}/${w.metadata.name}`;
    const tpl = w.spec.template;
    const pod = tpl.spec;
    if (!matches(w.spec.selector.matchLabels, tpl.metadata.labels)) fail(where, "selector does not match the pod labels");
    if (!/^[0-9a-f]{64}$/.test((tpl.metadata.annotations || {})["checksum/config"] || "")) {
        fail(where, "pod template has no checksum/config annotation");
    }
    for (const c of pod.containers) {
        checkContainerSecurity(where, pod, c);
        const lp = ((c.livenessProbe || {}).httpGet || {}).path;
        const rp = ((c.readinessProbe || {}).httpGet || {}).path;
        if (lp !== "/health/liveness") fail(where, `${c.name}: liveness probe path is ${lp}, not /health/liveness`);
        if (rp !== "/health/readiness") fail(where, `${c.name}: readiness probe path is ${rp}, not /health/readiness`);
        const portNames = new Set((c.ports || []).map((p) => p.name));
        for (const pr of [c.livenessProbe, c.readinessProbe, c.startupProbe]) {
            const port = pr && pr.httpGet && pr.httpGet.port;
            if (typeof port === "string" && !portNames.has(port)) fail(where, `${c.name}: probe port ${port} is not a container port`);
        }
        const vols = new Set((pod.volumes || []).map((v) => v.name));
        for (const t of (w.spec.volumeClaimTemplates || [])) vols.add(t.metadata.name);
        for (const m of c.volumeMounts || []) {
            if (!vols.has(m.name)) fail(where, `${c.name}: volumeMount ${m.name} has no volume`);
        }
        for (const ef of c.envFrom || []) {
            if (ef.secretRef && !ef.secretRef.name) fail(where, "envFrom secretRef without a name");
        }
    }
    for (const v of pod.volumes || []) {
        if (v.configMap && !find("ConfigMap", v.configMap.name)) fail(where, `volume ${v.name}: ConfigMap ${v.configMap.name} is not rendered`);
    }
    if (pod.serviceAccountName && pod.serviceAccountName !== "default" && !find("ServiceAccount", pod.serviceAccountName)) {
        fail(where, `ServiceAccount ${pod.serviceAccountName} is not rendered`);
    }
    if (w.kind === "StatefulSet" && !find("Service", w.spec.serviceName)) fail(where, `serviceName ${w.spec.serviceName} is not rendered`);

    /* The configuration the pod mounts must agree with the pod. */
    const cfgVol = (pod.volumes || []).find((v) => v.name === "config");
    const cm = cfgVol && find("ConfigMap", cfgVol.configMap.name);
    const c = pod.containers[0];
    if (!cm) {
        fail(where, "no config volume");
        continue;
    }
    const cfgArg = (c.args || [])[(c.args || []).indexOf("--config") + 1] || "";
    const cfgKey = path.basename(cfgArg);
    if (!(cfgKey in (cm.data || {}))) {
        fail(where, `--config ${cfgArg} is not a key of ConfigMap ${cm.metadata.name}`);
        continue;
    }
    let cfg;
    try {
        cfg = YAML.parse(cm.data[cfgKey], { uniqueKeys: true });
    } catch (e) {
        fail(where, `${cfgKey} is not valid YAML: ${e.message}`);
        continue;
    }
    const port = c.ports[0].containerPort;
    if (cfgKey === "router.yaml") {
        for (const sec of ["model_list", "router_settings", "general_settings", "tollgate"]) {
            if (!(sec in cfg)) fail(where, `router.yaml has no ${sec}`);
        }
        const tg = cfg.tollgate || {};
        if (tg.listen !== `0.0.0.0:${port}`) fail(where, `tollgate.listen ${tg.listen} does not match containerPort ${port}`);
        const spoolMount = (c.volumeMounts || []).find((m) => m.name === "spool");
        if (!spoolMount || !tg.spool || spoolMount.mountPath !== tg.spool.dir) fail(where, "tollgate.spool.dir is not the spool volume's mount path");
        if (!tg.kafka || !tg.kafka.brokers) fail(where, "tollgate.kafka.brokers missing");
        if (!Number.isInteger(tg.spool && tg.spool.max_bytes)) fail(where, "tollgate.spool.max_bytes is not an integer");
        /* router-svc drains for TOLLGATE_SHUTDOWN_GRACE_S after SIGTERM, then flushes. */
        const graceEnv = (c.env || []).find((e) => e.name === "TOLLGATE_SHUTDOWN_GRACE_S");
        const drain = graceEnv ? Number(graceEnv.value) : NaN;
        if (!Number.isInteger(drain)) fail(where, "TOLLGATE_SHUTDOWN_GRACE_S is not set to a number of seconds");
        /* ... and flushes the producer for TOLLGATE_FLUSH_DEADLINE_S: the pod's grace covers both. */
        const flushEnv = (c.env || []).find((e) => e.name === "TOLLGATE_FLUSH_DEADLINE_S");
        const flush = flushEnv ? Number(flushEnv.value) : NaN;
        if (!Number.isInteger(flush)) fail(where, "TOLLGATE_FLUSH_DEADLINE_S is not set to a number of seconds");
        const pre = (((c.lifecycle || {}).preStop || {}).sleep || {}).seconds || 0;
        if (!(pod.terminationGracePeriodSeconds > pre + drain + flush)) {
            fail(where, `terminationGracePeriodSeconds ${pod.terminationGracePeriodSeconds} does not exceed preStop ${pre}s + drain ${drain}s + flush ${flush}s`);
        }
        /* The admin listener: a container port of its own, a Service port, and what Prometheus
         * scrapes (the API port answers /metrics 404 then). */
        if (tg.admin_listen !== undefined) {
            const ap = (c.ports || []).find((p) => p.name === "admin");
            if (!ap || tg.admin_listen !== `0.0.0.0:${ap.containerPort}`) fail(where, `tollgate.admin_listen ${tg.admin_listen} is not the container port "admin"`);
            const svcs = all("Service").filter((s) => matches(s.spec.selector, w.spec.template.metadata.labels) && s.spec.clusterIP !== "None");
            if (!svcs.some((s) => (s.spec.ports || []).some((p) => p.targetPort === "admin"))) fail(where, "no Service port targets the admin listener");
            for (const sm of all("ServiceMonitor")) {
                if (!matches(sm.spec.selector.matchLabels, { ...w.spec.template.metadata.labels, "tollgate.io/metrics": "true" })) continue;
                if (!sm.spec.endpoints.every((e) => e.port === "admin")) fail(`ServiceMonitor/${sm.metadata.name}`, "scrapes the API port, where /metrics answers 404 (admin_listen is set)");
            }
        } else if ((c.ports || []).some((p) => p.name === "admin")) {
            fail(where, "a container port \"admin\" without tollgate.admin_listen");
        }
        for (const m of c.volumeMounts || []) {
            if (!(pod.volumes || []).some((v) => v.name === m.name) && !((w.spec.volumeClaimTemplates || []).some((t) => t.metadata.name === m.name))) {
                fail(where, `volumeMount ${m.name} has no volume`);
            }
        }
        const emptyDir = ((pod.volumes || []).find((v) => v.name === "spool") || {}).emptyDir;
        if (emptyDir && !(Number(emptyDir.sizeLimit) > tg.spool.max_bytes) && !/[KMGT]i?$/.test(emptyDir.sizeLimit)) {
            fail(where, `spool emptyDir sizeLimit ${emptyDir.sizeLimit} is not above max_bytes`);
        }
    } else if (cfgKey === "spend.yaml") {
        if (cfg.listen !== `0.0.0.0:${port}`) fail(where, `listen ${cfg.listen} does not match containerPort ${port}`);
        for (const k of ["kafka", "postgres", "redis", "batch"]) {
            if (!(k in cfg)) fail(where, `spend.yaml has no ${k}`);
        }
        if (cfg.kafka && (!cfg.kafka.brokers || !cfg.kafka.topic || !cfg.kafka.group_id)) fail(where, "spend.yaml kafka needs brokers, topic, group_id");
    }
}

for (const cm of all("ConfigMap")) {
    for (const [k, v] of Object.entries(cm.data || {})) {
        if (!k.endsWith(".json")) continue;
        try {
            const j = JSON.parse(v);
            if (!Array.isArray(j.panels) || j.panels.length === 0) fail(`ConfigMap/${cm.metadata.name}`, `${k} has no panels`);
        } catch (e) {
            fail(`ConfigMap/${cm.metadata.name}`, `${k} is not valid JSON: ${e.message}`);
        }
    }
}
for (const s of all("Service")) {
    const where = `Service/${s.metadata.name}`;
    const targets = workloads.filter((w) => matches(s.spec.selector, w.spec.template.metadata.labels));
    if (targets.length === 0) fail(where, "selector matches no workload");
    for (const p of s.spec.ports || []) {
        const ok = targets.some((w) => w.spec.template.spec.containers.some((c) => (c.ports || []).some((cp) => cp.name === p.targetPort || cp.containerPort === p.targetPort)));
        if (!ok) fail(where, `targetPort ${p.targetPort} is not a container port of its pods`);
    }
}
for (const d of [...all("PodDisruptionBudget"), ...all("NetworkPolicy")]) {
    const sel = d.kind === "NetworkPolicy" ? d.spec.podSelector.matchLabels : d.spec.selector.matchLabels;
    if (!workloads.some((w) => matches(sel, w.spec.template.metadata.labels))) fail(`${d.kind}/${d.metadata.name}`, "selector matches no workload");
}
for (const d of [...all("HorizontalPodAutoscaler"), ...all("ScaledObject")]) {
    const ref = d.spec.scaleTargetRef;
    if (!find(ref.kind || "Deployment", ref.name)) fail(`${d.kind}/${d.metadata.name}`, `target ${ref.kind} ${ref.name} is not rendered`);
}
for (const sm of all("ServiceMonitor")) {
    const svcs = all("Service").filter((s) => matches(sm.spec.selector.matchLabels, s.metadata.labels));
    if (svcs.length !== 1) fail(`ServiceMonitor/${sm.metadata.name}`, `selects ${svcs.length} Services, expected exactly 1`);
    for (const e of sm.spec.endpoints || []) {
        if (!svcs.every((s) => s.spec.ports.some((p) => p.name === e.port))) fail(`ServiceMonitor/${sm.metadata.name}`, `port ${e.port} is not a Service port`);
    }
}
if (all("HorizontalPodAutoscaler").some((h) => all("ScaledObject").some((so) => so.spec.scaleTargetRef.name === h.spec.scaleTargetRef.name))) {
    fail(file, "a HorizontalPodAutoscaler and a ScaledObject target the same workload");
}
for (const p of all("Pod")) {
    const where = `Pod/${p.metadata.name}`;
    if (((p.metadata.annotations || {})["helm.sh/hook"] || "") !== "test") fail(where, "a bare Pod that is not a helm test hook");
    for (const c of p.spec.containers) {
        checkContainerSecurity(where, p.spec, c);
        if (!(c.args || []).some((a) => /\/health\/readiness$/.test(a))) fail(where, `${c.name}: does not call /health/readiness`);
    }
}

if (problems.length) {
    for (const p of problems) console.error(`FAIL ${file}: ${p}`);
    process.exit(1);
}
const kinds = [...byKind.entries()].map(([k, v]) => `${k}=${v.length}`).join(" ");
console.log(`ok ${path.basename(file)}: ${docs.length} manifests (${kinds}), ${ruleCount} alert rules`);
