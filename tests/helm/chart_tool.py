#!/usr/bin/env python3
"""Thin command-line bridge from the Rust tests to the real Helm engine and to
kubernetes-validate (both PyPI packages, installed into .venv by .ci/run).

Every command prints one JSON document on stdout; a failure prints the tool's own message
on stderr and exits 1 (2 for a usage error). The Rust tests (tests/helm_*.rs,
tests/e2e_chart.rs) make every assertion; this script only runs the tools.

  check                                    the tools import (exit 0) or not (exit 1)
  lint CHART VALUES_JSON                   helm lint --strict: {"messages": [...], "errors": [...]}
  schema CHART VALUES_JSON                 values.schema.json check: {"ok": true} or exit 1
  template CHART VALUES_JSON NAME NS       helm template: {"template path": "manifest", ...}
  crds CHART                               the chart's crds/: {"crds/x.yaml": "text", ...}
  validate VERSION                         stdin: YAML stream; strict kubernetes-validate of
                                           each document: [{"kind", "name", "result", "error"}]
  install KUBECONFIG CHART VALUES_JSON NAME NS APPLY
                                           helm install (no wait): the release
  upgrade KUBECONFIG CHART VALUES_JSON NAME NS APPLY
                                           helm upgrade (no wait): the release
  uninstall KUBECONFIG NAME NS             helm uninstall (wait for deletion): the result

VALUES_JSON is a JSON object (a string, not a file) of user-supplied values. APPLY is
`server-side` (Helm 4's default) or `client-side` (`helm install --server-side=false`, Helm
3's way): before Kubernetes 1.25 the API server refuses a server-side apply of CRDs with
x-kubernetes-validations ("field not declared in schema").
"""

import contextlib

import json
import sys


def _values(text):
    values = json.loads(text)
    if not isinstance(values, dict):
        raise SystemExit("VALUES_JSON must be a JSON object")
    return values


def _out(doc):
    json.dump(doc, sys.stdout, indent=1, sort_keys=True, default=str)
    sys.stdout.write("\n")


def cmd_check(_args):
    import helm_python  # noqa: F401
    import kubernetes_validate  # noqa: F401

    from kubernetes_validate import utils

    _out({"helm_sdk": helm_python.helm_sdk_version(), "kubernetes": utils.latest_version()})


def cmd_lint(args):
    import helm_python as helm

    chart, values = args
    _out(helm.lint(chart, _values(values), strict=True))


def cmd_schema(args):
    import helm_python as helm

    chart, values = args
    with helm.Chart.load(chart) as c:
        c.validate_schema(_values(values))
    _out({"ok": True})


def cmd_template(args):
    import helm_python as helm

    chart, values, name, namespace = args
    with helm.Chart.load(chart) as c:
        # Like `helm template` / `helm install`: the values are checked against the schema
        # first, then rendered as for an install.
        c.validate_schema(_values(values))
        _out(c.render(_values(values), name=name, namespace=namespace, is_install=True))


def cmd_crds(args):
    import helm_python as helm

    (chart,) = args
    with helm.Chart.load(chart) as c:
        _out({f["name"]: f["data"] for f in c.crds})


def cmd_validate(args):
    import yaml
    from kubernetes_validate import utils

    (version,) = args
    if version == "latest":
        version = utils.latest_version()
    results = []
    for doc in yaml.safe_load_all(sys.stdin.read()):
        if not doc:
            continue
        entry = {
            "kind": doc.get("kind"),
            "apiVersion": doc.get("apiVersion"),
            "name": (doc.get("metadata") or {}).get("name"),
            "version": version,
        }
        try:
            utils.validate(doc, version, strict=True)
            entry["result"] = "valid"
        except utils.SchemaNotFoundError as e:
            entry["result"] = "no-schema"
            entry["error"] = str(e)
        except utils.ValidationError as e:
            entry["result"] = "invalid"
            path = ".".join(str(p) for p in e.path)
            entry["error"] = f"{path}: {e.message}"
        results.append(entry)
    _out(results)


def _config(kubeconfig, namespace):
    import helm_python as helm

    return helm.Config(kubeconfig_path=kubeconfig, namespace=namespace)


@contextlib.contextmanager
def _apply_mode(mode, as_string=False):
    """Sets Helm's server_side_apply option (the CLI's --server-side) for one call: the
    SDK's install/upgrade do not expose it, so it is added to the options they pass.
    Install takes a boolean, upgrade a string ("true", "false" or "auto")."""
    from helm_python import config

    if mode not in ("server-side", "client-side"):
        raise SystemExit(f"APPLY must be server-side or client-side, not {mode!r}")
    original = config._opts

    def opts(**pairs):
        server_side = mode == "server-side"
        pairs.setdefault("server_side_apply", str(server_side).lower() if as_string else server_side)
        return original(**pairs)

    config._opts = opts
    try:
        yield
    finally:
        config._opts = original


def cmd_install(args):
    kubeconfig, chart, values, name, namespace, mode = args
    with _config(kubeconfig, namespace) as cfg, _apply_mode(mode):
        release = cfg.install(
            chart, name, _values(values), namespace=namespace, create_namespace=True, timeout=120
        )
    _out({k: release.get(k) for k in ("name", "namespace", "revision", "status", "manifest")})


def cmd_upgrade(args):
    kubeconfig, chart, values, name, namespace, mode = args
    with _config(kubeconfig, namespace) as cfg, _apply_mode(mode, as_string=True):
        release = cfg.upgrade(chart, name, _values(values), namespace=namespace, timeout=120)
    _out({k: release.get(k) for k in ("name", "namespace", "revision", "status", "manifest")})


def cmd_uninstall(args):
    kubeconfig, name, namespace = args
    with _config(kubeconfig, namespace) as cfg:
        _out(cfg.uninstall(name, wait="watcher", timeout=120))


COMMANDS = {
    "check": (cmd_check, 0),
    "lint": (cmd_lint, 2),
    "schema": (cmd_schema, 2),
    "template": (cmd_template, 4),
    "crds": (cmd_crds, 1),
    "validate": (cmd_validate, 1),
    "install": (cmd_install, 6),
    "upgrade": (cmd_upgrade, 6),
    "uninstall": (cmd_uninstall, 3),
}


def main(argv):
    if len(argv) < 2 or argv[1] not in COMMANDS:
        sys.stderr.write(__doc__)
        return 2
    func, arity = COMMANDS[argv[1]]
    if len(argv) - 2 != arity:
        sys.stderr.write(f"{argv[1]}: expected {arity} arguments\n{__doc__}")
        return 2
    try:
        func(argv[2:])
    except ImportError as e:
        sys.stderr.write(f"missing Python package: {e} (pip install -r requirements-dev.txt)\n")
        return 1
    except Exception as e:  # the tool's own error, reported to the Rust test as-is
        sys.stderr.write(f"{type(e).__name__}: {e}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
