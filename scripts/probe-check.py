#!/usr/bin/env python3
"""Compare a `probe_mpa.py --all --json` run against our listener with the answers that
docs/probe-mpa.md records for us, or (--table) write that table from two runs.

  probe-check.py OURS.json docs/probe-mpa.md          # one PASS/FAIL line per case
  probe-check.py --table OURS.json SIW.json           # the markdown rows
"""
import json
import sys


def load(path):
    out = {}
    for line in open(path):
        line = line.strip()
        if line.startswith("{"):
            r = json.loads(line)
            out[r["case"]] = r
    return out


def answer(r):
    """(reply bytes after the key, how the connection ended)"""
    hexs = r.get("recv_hex") or ""
    reply = hexs[32:] if len(hexs) >= 40 else ("-" if not hexs else "partial " + hexs)
    end = r.get("end", "?")
    t = r.get("end_after_s")
    if end.startswith("still open"):
        e = "open"
    elif end.startswith("FIN"):
        e = "FIN" if t is None or t < 1.0 else "FIN after %ds" % round(t)
    elif "RST" in end or "reset" in end.lower():
        e = "RST"
    else:
        e = end
    return reply or "-", e


def table(ours_path, siw_path):
    ours, siw = load(ours_path), load(siw_path)
    for case, r in ours.items():
        o = answer(r)
        s = answer(siw[case]) if case in siw else ("?", "?")
        same = "same" if o == s else "differs"
        print(f"| `{case}` | `{o[0]}` {o[1]} | `{s[0]}` {s[1]} | {same} |")


def check(ours_path, doc_path):
    ours = load(ours_path)
    want = {}
    for line in open(doc_path):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 4 and cells[0].startswith("`") and cells[1].startswith("`"):
            case = cells[0].strip("`")
            reply, _, end = cells[1].partition("` ")
            want[case] = (reply.strip("`"), end.strip())
    if not want:
        print("FAIL table no rows found in " + doc_path)
        return 1
    bad = 0
    for case, w in want.items():
        if case not in ours:
            print(f"FAIL {case} not run (probe incomplete)")
            bad += 1
            continue
        got = answer(ours[case])
        # Timed closes may drift by a second under emulation.
        ok = got[0] == w[0] and (got[1] == w[1] or (got[1].startswith("FIN after") and w[1].startswith("FIN after")))
        print(("PASS" if ok else "FAIL") + f" {case} got {got[0]} {got[1]}, want {w[0]} {w[1]}")
        bad += not ok
    return 1 if bad else 0


if __name__ == "__main__":
    if sys.argv[1] == "--table":
        table(sys.argv[2], sys.argv[3])
    else:
        sys.exit(check(sys.argv[1], sys.argv[2]))
