"""The Helm chart, rendered offline with Helm's own engine (helm-python-sdk), linted strictly,
and every manifest validated against the Kubernetes schemas (kubernetes-validate --strict)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from gateway.config import parse_config
from gateway.protocol import formats
from gateway.protocol.state import generate_key

helm = pytest.importorskip("helm_python", reason="pip install helm-python-sdk (the chart extra)")
kubernetes_validate = pytest.importorskip("kubernetes_validate")

CHART = str(Path(__file__).resolve().parents[2] / "charts" / "mrtr-gateway")
KUBE = "1.30"
FLEET = {
    "replicaCount": 3,
    "redis": {"url": "redis://redis.data.svc:6379/0"},
    "sealing": {"existingSecret": "mrtr-keys"},
}


def render(values: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Rendered manifests by kind (and name for repeated kinds)."""
    rendered = helm.Chart.load(CHART).render(values, name="rel", namespace="gw")
    manifests: dict[str, dict[str, Any]] = {}
    for path, text in rendered.items():
        if path.endswith("NOTES.txt"):
            continue
        for doc in yaml.safe_load_all(text):
            if doc:
                key = (
                    doc["kind"]
                    if doc["kind"] not in manifests
                    else f"{doc['kind']}/{doc['metadata']['name']}"
                )
                manifests[key] = doc
    return manifests


def gateway_config(manifests: dict[str, dict[str, Any]], env: dict[str, str]) -> Any:
    return parse_config(yaml.safe_load(manifests["ConfigMap"]["data"]["config.yaml"]), env=env)


def container(manifests: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return manifests["Deployment"]["spec"]["template"]["spec"]["containers"][0]


def test_default_values_render_a_secure_single_replica() -> None:
    m = render({})
    assert {"Deployment", "Service", "ConfigMap", "ServiceAccount"} <= set(m)
    assert not {"Secret", "PodDisruptionBudget", "HorizontalPodAutoscaler"} & set(m)
    pod = m["Deployment"]["spec"]["template"]["spec"]
    c = container(m)
    assert pod["securityContext"]["runAsNonRoot"] and pod["securityContext"]["runAsUser"] == 65532
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert c["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert c["securityContext"]["allowPrivilegeEscalation"] is False
    assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert c["image"] == "ghcr.io/mrtr-gateway/mrtr-gateway:0.2.0"
    assert c["resources"]["requests"] and c["resources"]["limits"]["memory"]
    assert pod["terminationGracePeriodSeconds"] == 75
    assert (
        pod["topologySpreadConstraints"][0]["labelSelector"]["matchLabels"][
            "app.kubernetes.io/instance"
        ]
        == "rel"
    )
    assert [e["name"] for e in c["env"]] == ["MRTR_GATEWAY_REPLICA_ID"]
    config = gateway_config(m, env={})
    assert config.listen.host == "0.0.0.0" and config.fleet.drain_timeout_s == 60
    assert config.store.url == "memory://" and config.sealing.ephemeral


def test_the_config_checksum_rolls_the_pods_when_the_config_changes() -> None:
    annotation = "checksum/config"
    a = render({})["Deployment"]["spec"]["template"]["metadata"]["annotations"][annotation]
    b = render({"config": {"upstreams": [{"name": "x", "url": "http://other/mcp"}]}})
    assert b["Deployment"]["spec"]["template"]["metadata"]["annotations"][annotation] != a


def test_the_configs_other_fleet_settings_pass_and_the_charts_own_win() -> None:
    fleet = {"orphan_sweep_s": 30, "heartbeat_s": 9}
    config = gateway_config(render({"config": {"fleet": fleet}}), env={})
    assert config.fleet.orphan_sweep_s == 30
    assert config.fleet.heartbeat_s == 1 and config.fleet.drain_timeout_s == 60


def test_the_legacy_lane_is_on_by_default_and_its_values_reach_the_config() -> None:
    on = gateway_config(render({}), env={}).legacy
    assert (on.enabled, on.session_ttl_s, on.max_streams_per_principal, on.max_streams) == (
        True,
        86400,
        4,
        1024,
    )
    assert (on.max_bound_sessions, on.bound_session_idle_s) == (64, 600)
    legacy = {
        "enabled": False,
        "sessionTtlSeconds": 600,
        "maxStreamsPerPrincipal": 0,
        "maxBoundSessions": 3,
        "boundSessionIdleSeconds": 30,
    }
    off = gateway_config(render({"legacy": legacy}), env={}).legacy
    assert (off.enabled, off.session_ttl_s, off.max_streams_per_principal) == (False, 600, 0)
    assert (off.max_bound_sessions, off.bound_session_idle_s) == (3, 30)


def test_a_tools_task_policy_reaches_the_config() -> None:
    task = {"support": "optional", "after_s": 5, "ttl_s": 600, "poll_interval_ms": 2000}
    upstream = {"name": "x", "url": "http://x/mcp", "tools": {"build": {"task": task}}}
    config = gateway_config(render({"config": {"upstreams": [upstream]}}), env={})
    policy = config.upstreams[0].tools["build"].task
    assert (policy.support, policy.after_s, policy.ttl_s, policy.poll_interval_ms) == (
        "optional",
        5,
        600,
        2000,
    )


def test_the_catalog_and_isolation_reach_the_config() -> None:
    upstream = {
        "name": "notes",
        "url": "http://notes/mcp",
        "expose": {"tools": {"deny": ["delete_*"]}},
        "tools": {"read_note": {"name": "fetch_note", "description": "One note."}},
        "catalog": {"ttl_s": 30, "pinning": "block"},
        "pool": {"isolation": "caller", "max_opening": 2},
    }
    config = gateway_config(render({"config": {"upstreams": [upstream]}}), env={})
    notes = config.upstreams[0]
    assert notes.exposure.upstream_name("tools/call", "fetch_note") == "read_note"
    assert not notes.exposure.shows("tools/call", "delete_note")
    assert (notes.catalog.ttl_s, notes.catalog.pinning) == (30, "block")
    assert (notes.pool.isolation, notes.pool.max_opening) == ("caller", 2)


def test_an_endpoint_of_several_upstreams_reaches_the_config() -> None:
    upstreams = [
        {"name": "notes", "url": "http://notes/mcp"},
        {"name": "tickets", "url": "http://tickets/mcp"},
    ]
    endpoint = {"path": "/mcp", "upstreams": ["notes", "tickets"], "on_upstream_down": "fail"}
    values = {"config": {"upstreams": upstreams, "endpoints": [endpoint]}}
    config = gateway_config(render(values), env={})
    (joined,) = config.endpoints
    assert (joined.path, joined.upstreams, joined.on_upstream_down) == (
        "/mcp",
        ("notes", "tickets"),
        "fail",
    )
    assert [u.prefix for u in config.upstreams] == ["notes_", "tickets_"]


def test_approvals_reach_the_config() -> None:
    upstream = {
        "name": "notes",
        "url": "http://notes/mcp",
        "approval": "destructive",
        "approval_ttl_s": 300,
        "tools": {"delete_note": {"approval": "required"}, "read_note": {"approval": "none"}},
    }
    config = gateway_config(render({"config": {"upstreams": [upstream]}}), env={})
    notes = config.upstreams[0]
    assert (notes.approval, notes.approval_ttl_s) == ("destructive", 300)
    assert notes.tools["delete_note"].approval == "required"
    assert notes.tools["read_note"].approval == "none"


AUDIT = {
    "log": True,
    "stream": {"enabled": True, "name": "trail", "maxLen": 5000},
    "file": {"enabled": True},
    "includeAnswers": True,
    "redact": ["(?i)pin"],
}


def test_the_audit_trail_is_off_by_default_and_its_values_reach_the_config(tmp_path) -> None:
    m = render({})
    assert "audit" not in yaml.safe_load(m["ConfigMap"]["data"]["config.yaml"])
    assert "audit" not in {
        v["name"] for v in m["Deployment"]["spec"]["template"]["spec"]["volumes"]
    }
    m = render({**FLEET, "audit": AUDIT})
    data = yaml.safe_load(m["ConfigMap"]["data"]["config.yaml"])
    assert data["audit"] == {
        "log": True,
        "stream": {"name": "trail", "max_len": 5000},
        "file": {"path": "/var/log/mrtr-gateway/audit.jsonl"},
        "buffer_events": 10000,
        "include_arguments": False,
        "include_questions": False,
        "include_answers": True,
        "include_results": False,
        "redact": ["(?i)pin"],
        "max_value_bytes": 1024,
    }
    # The gateway reads it as meant (the file's folder is the pod's volume: here, a folder
    # of the test's), the stream on the store's Redis.
    data["audit"]["file"]["path"] = str(tmp_path / "audit.jsonl")
    env = {
        "MRTR_GATEWAY_STORE_URL": FLEET["redis"]["url"],
        "MRTR_GATEWAY_SEALING_KEYS": generate_key(),
    }
    audit = parse_config(data, env=env).audit
    assert audit is not None and audit.stream is not None
    assert (audit.stream.url, audit.stream.key) == (FLEET["redis"]["url"], "mrtr:{trail}:events")
    assert audit.include_answers and [p.pattern for p in audit.redact] == ["(?i)pin"]
    pod = m["Deployment"]["spec"]["template"]["spec"]
    assert {"name": "audit", "mountPath": "/var/log/mrtr-gateway"} in container(m)["volumeMounts"]
    assert {"name": "audit", "emptyDir": {"sizeLimit": "1Gi"}} in pod["volumes"]


def test_the_audit_file_may_live_on_a_volume_of_the_operators() -> None:
    claim = {"persistentVolumeClaim": {"claimName": "audit"}}
    m = render({"audit": {"file": {"enabled": True, "volume": claim}}})
    assert {"name": "audit", **claim} in m["Deployment"]["spec"]["template"]["spec"]["volumes"]
    for manifest in m.values():
        kubernetes_validate.validate(manifest, KUBE, strict=True)


def test_a_three_replica_redis_fleet_renders_with_shared_keys_and_a_budget() -> None:
    m = render(FLEET)
    assert m["Deployment"]["spec"]["replicas"] == 3
    env = {e["name"]: e for e in container(m)["env"]}
    assert env["MRTR_GATEWAY_STORE_URL"]["value"] == "redis://redis.data.svc:6379/0"
    assert env["MRTR_GATEWAY_SEALING_KEYS_FILE"]["value"] == "/etc/mrtr-gateway/keys/keys"
    assert env["MRTR_GATEWAY_REPLICA_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    volumes = {v["name"]: v for v in m["Deployment"]["spec"]["template"]["spec"]["volumes"]}
    assert volumes["keys"]["secret"]["secretName"] == "mrtr-keys"
    assert m["PodDisruptionBudget"]["spec"]["minAvailable"] == 1
    assert "Secret" not in m  # keys come from the existing Secret, never from values
    key = generate_key()
    config = gateway_config(
        m,
        env={
            "MRTR_GATEWAY_STORE_URL": env["MRTR_GATEWAY_STORE_URL"]["value"],
            "MRTR_GATEWAY_SEALING_KEYS": key,
        },
    )
    assert config.store.shared and not config.sealing.ephemeral


def test_a_rolling_upgrade_keeps_two_releases_at_most_and_never_kills_a_draining_pod() -> None:
    """docs/operations.md, "Releases and upgrades": the rollout settings its promise needs."""
    m = render({**FLEET, "drainTimeoutSeconds": 300})
    strategy = m["Deployment"]["spec"]["strategy"]
    assert strategy == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1},
    }
    pod = m["Deployment"]["spec"]["template"]["spec"]
    assert pod["terminationGracePeriodSeconds"] == 300 + 15  # the drain, and time to exit
    assert m["PodDisruptionBudget"]["spec"]["minAvailable"] == 1
    fleet = gateway_config(m, env={}).fleet
    assert (fleet.drain_timeout_s, fleet.format_settle_s, fleet.format_level) == (300, 900, 0)

    pinned = {**FLEET, "upgrade": {"formatSettleSeconds": 3600, "formatLevel": 1}}
    fleet = gateway_config(render(pinned), env={}).fleet
    assert (fleet.format_settle_s, fleet.format_level) == (3600, 1)


def test_the_charts_format_levels_are_the_gateways() -> None:
    schema = json.loads((Path(CHART) / "values.schema.json").read_text())
    levels = schema["properties"]["upgrade"]["properties"]["formatLevel"]["enum"]
    assert levels == [0, *range(formats.PREVIOUS, formats.LEVEL + 1)]
    with pytest.raises(helm.HelmValuesError):
        helm.Chart.load(CHART).validate_schema({"upgrade": {"formatLevel": formats.LEVEL + 1}})


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"replicaCount": 3}, "replicaCount > 1 (or autoscaling) needs a shared Redis store"),
        ({"autoscaling": {"enabled": True}}, "needs a shared Redis store"),
        ({"redis": {"url": "redis://r:6379/0"}}, "needs a sealing key every replica shares"),
        ({"audit": {"stream": {"enabled": True}}}, "audit.stream.enabled needs the store's Redis"),
    ],
)
def test_configurations_that_cannot_work_are_refused_at_render_time(
    values: dict, message: str
) -> None:
    with pytest.raises(helm.HelmError, match=re.escape(message)):
        render(values)


@pytest.mark.parametrize(
    "values",
    [
        {"replicaCount": 0},
        {"redis": {"url": "http://nope"}},
        {"config": {"upstreams": [], "store": {}}},
        {"typo": 1},
        {"legacy": {"enabled": "yes"}},
        {"legacy": {"sessionTtlSeconds": 0}},
        {"legacy": {"maxStreamsPerPrincipal": -1}},
        {"legacy": {"maxStream": 5}},
        {"legacy": {"maxBoundSessions": 0}},
        {"legacy": {"boundSessionIdleSeconds": 0}},
        {"config": {"upstreams": [{"name": "x", "url": "http://x/mcp"}], "legacy": {}}},
        {"config": {"upstreams": [{"name": "x", "url": "http://x/mcp"}], "audit": {"log": True}}},
        {"audit": {"log": "yes"}},
        {"audit": {"stream": {"name": "a{b}"}}},
        {"audit": {"maxValueBytes": 8}},
        {"audit": {"includeArgs": True}},
        {
            "config": {
                "upstreams": [{"name": "x", "url": "http://x", "tools": {"t": {"task": "no"}}}]
            }
        },
        {"config": {"upstreams": [{"name": "x", "url": "http://x", "catalog": {"pinning": "no"}}]}},
        {"config": {"upstreams": [{"name": "x", "url": "http://x", "expose": {"tool": {}}}]}},
        {"config": {"upstreams": [{"name": "x", "url": "http://x", "pool": {"isolation": "x"}}]}},
        {"config": {"upstreams": [{"name": "x", "url": "http://x", "approval": "sometimes"}]}},
        {
            "config": {
                "upstreams": [{"name": "x", "url": "http://x"}],
                "endpoints": [{"path": "/mcp", "upstreams": ["x"], "prefix": "sometimes"}],
            }
        },
        {"config": {"upstreams": [{"name": "x", "url": "http://x", "approval_ttl_s": -1}]}},
        {
            "config": {
                "upstreams": [
                    {"name": "x", "url": "http://x", "tools": {"t": {"approval": "always"}}}
                ]
            }
        },
        {
            "config": {
                "upstreams": [
                    {"name": "x", "url": "http://x", "tools": {"t": {"task": {"ttl": 5}}}}
                ]
            }
        },
    ],
)
def test_the_values_schema_refuses_bad_values(values: dict) -> None:
    with pytest.raises(helm.HelmError):
        render(values)


EVERYTHING = {
    **FLEET,
    "redis": {"enabled": True},
    "audit": AUDIT,
    "sealing": {"keys": [generate_key()]},
    "autoscaling": {"enabled": True},
    "serviceMonitor": {"enabled": True},
    "prometheusRule": {"enabled": True},
    "grafanaDashboard": {"enabled": True},
    "networkPolicy": {
        "enabled": True,
        "ingressFrom": [{"podSelector": {"matchLabels": {"role": "client"}}}],
    },
}


def test_optional_parts_render_when_enabled() -> None:
    m = render(EVERYTHING)
    assert {
        "HorizontalPodAutoscaler",
        "ServiceMonitor",
        "PrometheusRule",
        "NetworkPolicy",
        "Secret",
        "PodDisruptionBudget",
    } <= set(m)
    assert "replicas" not in m["Deployment"]["spec"]  # the autoscaler owns it
    assert any(k.startswith("Deployment/") and k.endswith("-redis") for k in m)
    env = {e["name"]: e for e in container(m)["env"]}
    assert env["MRTR_GATEWAY_STORE_URL"]["value"] == "redis://rel-mrtr-gateway-redis:6379/0"


def selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """Whether a Kubernetes label selector (matchLabels, matchExpressions) matches `labels`."""
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for expr in selector.get("matchExpressions", []):
        key, op, values = expr["key"], expr["operator"], expr.get("values", [])
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def test_the_gateways_selectors_leave_the_in_chart_redis_out_and_its_policy_lets_them_in() -> None:
    m = render({**EVERYTHING, "autoscaling": {"enabled": False}})
    gateway_pod = m["Deployment"]["spec"]["template"]
    redis_pod = m["Deployment/rel-mrtr-gateway-redis"]["spec"]["template"]
    gateway, redis = gateway_pod["metadata"]["labels"], redis_pod["metadata"]["labels"]
    spread = gateway_pod["spec"]["topologySpreadConstraints"][0]["labelSelector"]
    services = {k: v for k, v in m.items() if k.split("/")[0] == "Service"}
    gateway_service = next(
        s for s in services.values() if s["metadata"]["name"] == "rel-mrtr-gateway"
    )
    for selector in (
        m["PodDisruptionBudget"]["spec"]["selector"],
        m["NetworkPolicy"]["spec"]["podSelector"],
        spread,
    ):
        assert selects(selector, gateway) and not selects(selector, redis), selector
    # The ServiceMonitor picks the gateway's Service and not Redis's.
    monitor = m["ServiceMonitor"]["spec"]["selector"]
    picked = [
        s["metadata"]["name"]
        for s in services.values()
        if selects(monitor, s["metadata"]["labels"])
    ]
    assert picked == ["rel-mrtr-gateway"]
    # The gateway's Service selects by labels alone; Redis's pod has no port it targets.
    target = gateway_service["spec"]["ports"][0]["targetPort"]
    assert target not in {p["name"] for p in redis_pod["spec"]["containers"][0]["ports"]}
    # Redis's own policy: its pod, from the gateway's pods, on its port.
    policy = m["NetworkPolicy/rel-mrtr-gateway-redis"]["spec"]
    assert selects(policy["podSelector"], redis) and not selects(policy["podSelector"], gateway)
    (rule,) = policy["ingress"]
    assert rule["ports"] == [{"port": "redis", "protocol": "TCP"}]
    (source,) = rule["from"]
    assert selects(source["podSelector"], gateway) and not selects(source["podSelector"], redis)


def test_the_chart_lints_strictly() -> None:
    for values in ({}, FLEET, EVERYTHING):
        report = helm.lint(CHART, values, strict=True)
        assert report["errors"] == [], report
        assert all(m["severity"] <= 1 for m in report["messages"]), report  # INFO at most


@pytest.mark.parametrize(
    "values", [{}, FLEET, EVERYTHING], ids=["default", "three-replica-redis", "everything"]
)
def test_every_rendered_manifest_passes_kubernetes_validate_strict(values: dict) -> None:
    unchecked = []
    for manifest in render(values).values():
        try:
            kubernetes_validate.validate(manifest, KUBE, strict=True)
        except kubernetes_validate.SchemaNotFoundError:
            unchecked.append(manifest["kind"])  # CRDs have no bundled schema
    assert set(unchecked) <= {"ServiceMonitor", "PrometheusRule"}


AUTH_AND_STDIO = {
    "image": {"repository": "registry.example.com/gw-with-files", "tag": "1"},
    "config": {
        "upstreams": [
            {
                "name": "files",
                "command": ["node", "/srv/files/server.js"],
                "env": {"API_TOKEN": "${FILES_TOKEN}"},
            },
            {
                "name": "github",
                "url": "https://github-mcp.internal/mcp",
                "path": "/github",
                "oauth_client": {
                    "token_url": "https://login.example.com/token",
                    "client_id": "gateway",
                    "client_secret_file": "/etc/mrtr-gateway/upstream-secrets/github/client-secret",
                },
                "tools": {"delete_repo": {"scopes": ["admin"]}},
            },
        ],
        "limits": {"rate": {"per_principal": {"per_s": 20, "burst": 40}}},
    },
    "auth": {
        "publicUrl": "https://mcp.example.com",
        "issuer": "https://login.example.com",
        "scopes": ["mcp"],
        "apiKeys": {"existingSecret": "gw-api-keys"},
    },
    "upstreamSecrets": [
        {"upstream": "github", "existingSecret": "github-oauth", "secretKey": "client-secret"}
    ],
    "extraEnv": [
        {"name": "FILES_TOKEN", "valueFrom": {"secretKeyRef": {"name": "files", "key": "t"}}}
    ],
    "tmpSizeLimit": "256Mi",
}


def test_auth_and_a_stdio_server_in_the_pod_render_and_mount_their_secrets(tmp_path) -> None:
    m = render(AUTH_AND_STDIO)
    config = yaml.safe_load(m["ConfigMap"]["data"]["config.yaml"])
    assert config["auth"] == {
        "public_url": "https://mcp.example.com",
        "oauth": {"issuer": "https://login.example.com", "scopes": ["mcp"]},
        "api_keys_file": "/etc/mrtr-gateway/auth/api-keys.yaml",
    }
    mounts = {v["mountPath"]: v["name"] for v in container(m)["volumeMounts"]}
    assert mounts["/etc/mrtr-gateway/auth"] == "api-keys"
    assert mounts["/etc/mrtr-gateway/upstream-secrets/github"] == "upstream-secret-github"
    volumes = {v["name"]: v for v in m["Deployment"]["spec"]["template"]["spec"]["volumes"]}
    assert volumes["api-keys"]["secret"]["secretName"] == "gw-api-keys"
    assert volumes["tmp"]["emptyDir"]["sizeLimit"] == "256Mi"
    for manifest in m.values():
        if manifest["kind"] not in ("ServiceMonitor", "PrometheusRule"):
            kubernetes_validate.validate(manifest, KUBE, strict=True)
    # The rendered config is one the gateway accepts, once the mounted files exist.
    (tmp_path / "api-keys.yaml").write_text("[]\n")
    (tmp_path / "client-secret").write_text("s3cret\n")
    text = m["ConfigMap"]["data"]["config.yaml"]
    text = text.replace("/etc/mrtr-gateway/auth/", f"{tmp_path}/")
    text = text.replace("/etc/mrtr-gateway/upstream-secrets/github/", f"{tmp_path}/")
    parsed = parse_config(yaml.safe_load(text), env={"FILES_TOKEN": "t"})
    assert parsed.auth is not None and parsed.upstreams[0].transport == "stdio"


def test_an_upstream_needs_exactly_one_of_a_url_and_a_command() -> None:
    for upstream in ({"name": "x"}, {"name": "x", "url": "http://a/mcp", "command": ["b"]}):
        with pytest.raises(Exception, match="(?i)schema|oneOf|valid"):
            render({"config": {"upstreams": [upstream]}})


def test_the_alerts_and_the_dashboard_name_metrics_the_gateway_exports() -> None:
    from gateway.observability import Metrics

    exported = {m.name for m in Metrics().registry.collect()}
    exported |= {f"{name}_total" for name in exported} | {f"{n}_bucket" for n in exported}
    m = render(EVERYTHING)
    rules = m["PrometheusRule"]["spec"]["groups"][0]["rules"]
    assert {r["alert"] for r in rules} >= {
        "MrtrCallsLost",
        "MrtrParkedCallsUpstreamLost",
        "MrtrOrphanedSessionsNotEnded",
        "MrtrStoreErrors",
        "MrtrDrainTimeouts",
    }
    (holder,) = [v for v in m.values() if v["metadata"]["name"].endswith("-dashboard")]
    dashboard = json.loads(holder["data"]["mrtr-gateway.json"])
    exprs = [r["expr"] for r in rules]
    exprs += [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    named = {n for e in exprs for n in re.findall(r"\b(mrtr_[a-z_]+)", e)}
    assert named and named <= exported, named - exported
