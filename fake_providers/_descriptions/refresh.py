"""Refresh the vendored API descriptions from their published sources.

    python -m fake_providers._descriptions.refresh \\
        --stripe SPEC3.yaml --stripe-fixtures FIXTURES3.json \\
        --github API.GITHUB.COM.json --sendgrid SENDGRID-OAI/spec/json

Where each comes from (the machine needs no network beyond getting these files):

- Stripe: ``openapi/spec3.yaml`` (or ``.json``) and ``openapi/fixtures3.json`` of
  https://github.com/stripe/openapi (MIT);
- GitHub: ``generated/api.github.com.json`` of the npm package ``@octokit/openapi``
  (``npm pack @octokit/openapi``; MIT), GitHub's own REST description;
- SendGrid: the folder ``spec/json`` of https://github.com/twilio/sendgrid-oai (MIT).

Each description is cut down to the operations the fakes serve (:data:`SELECTIONS`) and the
components they reference, without the prose (descriptions, summaries, examples), and written
as gzipped JSON beside this module, with ``SOURCES.json`` recording the source, its version and
what was kept. Nothing else of the fakes changes: they read whatever is vendored.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
_METHODS = ("get", "post", "put", "patch", "delete")
#: Prose and tooling metadata that no fake reads: left out of the vendored copy.
_DROPPED = frozenset(
    {"description", "summary", "example", "examples", "externalDocs", "x-codeSamples",
     "x-github", "x-stripeOperations", "x-stripeResource", "x-expansionResources",
     "x-stripeBypassValidation", "x-octokit", "x-displayName", "x-tags"}
)

#: Which operations of each description the fake of it serves.
SELECTIONS: dict[str, Callable[[str, str, Mapping[str, Any]], bool]] = {
    "stripe": lambda path, method, op: bool(re.match(
        r"/v1/(customers|charges|payment_intents|refunds|payment_methods|setup_intents|invoices"
        r"|invoiceitems|products|prices|subscriptions|balance|balance_transactions|events"
        r"|checkout/sessions|disputes|coupons)(/|$)", path)),
    "github": lambda path, method, op: (
        (op.get("tags") or [""])[0] in ("issues", "pulls", "search", "reactions")
        or op.get("operationId") == "repos/get"
    ),
    "sendgrid": lambda path, method, op: True,  # the files chosen are the selection
}
#: SendGrid's description comes in one file per API: the ones the fake serves.
SENDGRID_FILES = (
    "tsg_mail_v3", "tsg_email_activity_v3", "tsg_scheduled_sends_v3", "tsg_suppressions_v3",
    "tsg_templates_v3", "tsg_mc_contacts_v3", "tsg_mc_lists_v3", "tsg_verified_senders_v3",
    "tsg_webhooks_v3",
)


def _read(path: Path) -> dict[str, Any]:
    text = path.read_text(encoding="utf-8")
    if path.suffix in (".yaml", ".yml"):
        import yaml  # type: ignore[import-untyped]

        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        data = yaml.load(text, Loader=loader)
    else:
        data = json.loads(text)
    if not isinstance(data, dict):
        raise SystemExit(f"{path} does not hold an OpenAPI document")
    return data


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str):
            yield ref
        for value in node.values():
            yield from _refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _refs(value)


def _strip(node: Any, *, names: bool = False) -> Any:
    """``node`` without :data:`_DROPPED` keys (``names``: ``node`` maps names to schemas, a
    ``properties`` object, where a property may be called ``description``)."""
    if isinstance(node, dict):
        return {
            key: _strip(value, names=key == "properties")
            for key, value in node.items()
            if names or key not in _DROPPED
        }
    if isinstance(node, list):
        return [_strip(value) for value in node]
    return node


def trim(
    data: dict[str, Any], keep: Callable[[str, str, Mapping[str, Any]], bool]
) -> dict[str, Any]:
    """``data`` with only the operations ``keep`` selects and the components they reach."""
    paths: dict[str, Any] = {}
    for path, item in (data.get("paths") or {}).items():
        kept = {m: op for m, op in item.items() if m in _METHODS and keep(path, m, op)}
        if kept:
            shared = {k: v for k, v in item.items() if k == "parameters"}
            paths[path] = {**shared, **kept}
    out: dict[str, Any] = {
        "openapi": data["openapi"],
        "info": {k: v for k, v in data.get("info", {}).items() if k in ("title", "version")},
        "servers": data.get("servers", []),
        "paths": paths,
    }
    components: dict[str, dict[str, Any]] = {}
    todo = list(_refs(paths))
    seen: set[str] = set()
    while todo:
        ref = todo.pop()
        if ref in seen or not ref.startswith("#/components/"):
            continue
        seen.add(ref)
        _, _, section, name = ref.split("/", 3)
        target = data["components"][section][name]
        components.setdefault(section, {})[name] = target
        todo += list(_refs(target))
    out["components"] = {s: dict(sorted(c.items())) for s, c in sorted(components.items())}
    for scheme in ("securitySchemes",):
        if scheme in data.get("components", {}):
            out["components"][scheme] = data["components"][scheme]
    return dict(_strip(out))


def stripe_prefixes(fixtures: Mapping[str, Any]) -> dict[str, str]:
    """Each Stripe resource's id prefix (``cus``, ``pi``...), read off the ids of Stripe's own
    fixtures."""
    found: dict[str, str] = {}
    for name, example in (fixtures.get("resources") or {}).items():
        object_id = example.get("id") if isinstance(example, dict) else None
        if isinstance(object_id, str) and "_" in object_id:
            found[name] = object_id.rsplit("_", 1)[0]
    return found


def merge(documents: list[dict[str, Any]]) -> dict[str, Any]:
    """One OpenAPI document of several (SendGrid's per-API files). Components of one name
    must be the same in every file that has them."""
    out: dict[str, Any] = {"openapi": documents[0]["openapi"], "info": documents[0]["info"],
                           "servers": documents[0].get("servers", []), "paths": {},
                           "components": {}}
    for doc in documents:
        for path, item in doc.get("paths", {}).items():
            out["paths"].setdefault(path, {}).update(item)
        for section, items in doc.get("components", {}).items():
            merged = out["components"].setdefault(section, {})
            for name, value in items.items():
                if name in merged and merged[name] != value:
                    value = merged[name] if len(json.dumps(merged[name])) > len(
                        json.dumps(value)) else value
                merged[name] = value
    return out


def write(name: str, data: dict[str, Any], source: dict[str, Any]) -> dict[str, Any]:
    text = json.dumps(data, sort_keys=True, separators=(",", ":"))
    (HERE / f"{name}.json.gz").write_bytes(gzip.compress(text.encode("utf-8"), mtime=0))
    operations = sum(1 for item in data["paths"].values() for m in item if m in _METHODS)
    return {**source, "version": data["info"].get("version"), "operations": operations,
            "paths": len(data["paths"])}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stripe", type=Path)
    parser.add_argument("--stripe-fixtures", type=Path)
    parser.add_argument("--github", type=Path)
    parser.add_argument("--sendgrid", type=Path, help="the folder spec/json of sendgrid-oai")
    args = parser.parse_args(argv)
    sources_file = HERE / "SOURCES.json"
    sources = json.loads(sources_file.read_text()) if sources_file.exists() else {}
    if args.stripe:
        data = trim(_read(args.stripe), SELECTIONS["stripe"])
        if args.stripe_fixtures:
            prefixes = stripe_prefixes(_read(args.stripe_fixtures))
            for schema_name, schema in data["components"].get("schemas", {}).items():
                resource = schema.get("x-resourceId") or schema_name
                if resource in prefixes:
                    schema["x-crashpoints-id-prefix"] = prefixes[resource]
        sources["stripe"] = write("stripe", data, {
            "source": "https://github.com/stripe/openapi openapi/spec3.yaml (and fixtures3.json "
                      "for id prefixes)", "licence": "MIT"})
    if args.github:
        data = trim(_read(args.github), SELECTIONS["github"])
        sources["github"] = write("github", data, {
            "source": "npm @octokit/openapi generated/api.github.com.json", "licence": "MIT"})
    if args.sendgrid:
        docs = [_read(args.sendgrid / f"{name}.json") for name in SENDGRID_FILES]
        data = trim(merge(docs), SELECTIONS["sendgrid"])
        data["info"] = {"title": "Twilio SendGrid v3 API", "version": docs[0]["info"]["version"]}
        sources["sendgrid"] = write("sendgrid", data, {
            "source": "https://github.com/twilio/sendgrid-oai spec/json/ "
                      + ", ".join(SENDGRID_FILES), "licence": "MIT"})
    sources_file.write_text(json.dumps(sources, indent=2, sort_keys=True) + "\n")
    for name, said in sorted(sources.items()):
        print(f"{name}: {said['operations']} operations, version {said['version']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
