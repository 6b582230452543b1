#!/usr/bin/env python3
"""Calls keel's Calculator example over HTTP with JSON, using only Python's standard library.

Usage:
    python3 calculator.py URL            # e.g. http://127.0.0.1:7000

Start a host to call with:
    cargo run --example calculator -- --serve http://127.0.0.1:7000

The convention (POST /{Service}/{operation} with a JSON object of the parameters; errors as
{"code": ..., "message": ...}; typed faults as 422 {"code": "fault", "fault": ...};
GET /{Service} describes the contract) is documented in crates/keel/HTTP.md.
Exits 0 when every answer is as expected, 1 otherwise.
"""

import json
import sys
import urllib.error
import urllib.request


def request(method, url, body=None):
    """One HTTP request; returns (HTTP status, keel-status header, decoded JSON body)."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        url, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, resp.headers.get("keel-status"), json.loads(resp.read())
    except urllib.error.HTTPError as err:  # 4xx and 5xx still carry a keel answer
        return err.code, err.headers.get("keel-status"), json.loads(err.read())


def call(base, operation, **params):
    return request("POST", f"{base}/Calculator/{operation}", params)


def main(argv):
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    base = argv[1].rstrip("/")
    failures = []

    def check(what, got, want):
        ok = got == want
        print(f"{what} = {got}" + ("" if ok else f"   (expected {want})"))
        if not ok:
            failures.append(what)

    for name, op, a, b, want in [
        ("Add", "add", 100, 15.99, 100 + 15.99),
        ("Subtract", "subtract", 145, 76.54, 145 - 76.54),
        ("Multiply", "multiply", 9, 81.25, 9 * 81.25),
        ("Divide", "divide", 22, 7, 22 / 7),
    ]:
        status, keel_status, value = call(base, op, a=a, b=b)
        check(f"{name}({a}, {b})", (status, keel_status, value), (200, "ok", want))

    status, keel_status, value = call(base, "divide", a=22, b=0)
    check(
        "Divide(22, 0)",
        (status, keel_status, value),
        (422, "fault", {"code": "fault", "fault": {"dividend": 22.0}}),
    )

    status, keel_status, value = call(base, "square_root", x=2)
    check("SquareRoot(2)", (status, keel_status, value.get("code")), (404, "unknown_operation", "unknown_operation"))

    status, _, desc = request("GET", f"{base}/Calculator")
    check("GET /Calculator status", status, 200)
    check("service", desc.get("service"), "Calculator")
    ops = {op["name"]: op for op in desc.get("operations", [])}
    check("operations", sorted(ops), ["add", "divide", "multiply", "subtract"])
    # Types as JSON Schema; named types are `$ref`s into `$defs`.
    number = {"type": "number", "format": "double"}
    check(
        "add",
        ops.get("add"),
        {
            "name": "add",
            "params": [{"name": "a", "type": number}, {"name": "b", "type": number}],
            "returns": number,
            "fault": None,
            "one_way": False,
            "streamed": False,
        },
    )
    check("divide's fault", ops.get("divide", {}).get("fault"), {"$ref": "#/$defs/DivideByZero"})
    check("DivideByZero", desc.get("$defs", {}).get("DivideByZero", {}).get("required"), ["dividend"])

    if failures:
        print(f"FAILED: {', '.join(failures)}")
        return 1
    print("all answers as expected")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
