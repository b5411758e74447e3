"""head/base time per (collective, algorithm) from lat-1..5.json (base, head,
base, head, base): geometric mean over the sizes of head's mean time over
base's mean time (below 1: head faster), and base's own spread (lat-3 over
lat-1). Run: python3 latency.py"""
import json, math, collections

def times(i):
    rows = json.load(open(f"lat-{i}.json"))["rows"]
    return {(r["collective"], r["algorithm"], r["size"]): r["out_of_place"]["time_us"] for r in rows}

base = [times(i) for i in (1, 3, 5)]
head = [times(i) for i in (2, 4)]
groups = collections.defaultdict(list)
for k in sorted(base[0]):
    b = sum(t[k] for t in base) / len(base)
    h = sum(t[k] for t in head) / len(head)
    groups[k[:2]].append((k[2], b, h, base[1][k] / base[0][k]))
geo = lambda xs: math.exp(sum(map(math.log, xs)) / len(xs))
print("| collective | algorithm | sizes | head/base time | base run 3 / run 1 | 8 B base, head (us) |")
print("|---|---|---|---|---|---|")
for (c, a), v in sorted(groups.items()):
    small = [x for x in v if x[0] == 8][0]
    print(f"| {c} | {a} | {len(v)} | {geo([h / b for _, b, h, _ in v]):.3f} | "
          f"{geo([s for *_, s in v]):.3f} | {small[1]:.2f}, {small[2]:.2f} |")
