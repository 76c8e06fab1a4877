"""`fasop prices`: node prices from a SkyPilot catalog `vms.csv` into a cluster spec (docs/prices.md).

- Rows are read by header name (AWS and GCP order their columns differently; extra columns are
  ignored). A node type's rows are those whose `InstanceType` is its `instance`.
- GCP prices a GPU VM as a host row plus an accelerator row (empty `InstanceType`): a host row
  naming an accelerator gets the accelerator row of the same zone, name and count added.
- Per region, on-demand is the lowest `Price` over its zones and spot the lowest `SpotPrice`
  (spot varies by zone and hour: the minimum is what a zone-flexible user could get at fetch time).
  Without a region, each node type takes the region with the lowest on-demand price.
- An empty price leaves the spec's value as it is (with a note).
- The spec is edited line by line (its comments stay); only `usd_per_hour`,
  `spot_usd_per_hour`, `price_date` and `price_source` of the node types change.
"""

from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import dataclass, replace
from pathlib import Path

from fasop.core import limits
from fasop.core.errors import FasopError, SpecError
from fasop.specs.files import decode_utf8, read_bounded, show
from fasop.specs.types import CATALOG_ESTIMATORS, ClusterSpec, NodeType

REQUIRED = ("InstanceType", "AcceleratorName", "AcceleratorCount", "Region", "AvailabilityZone", "Price", "SpotPrice")
PRICE_KEYS = ("usd_per_hour", "spot_usd_per_hour", "price_date", "price_source")
_DATE = re.compile(r"\d{4}-\d{2}(-\d{2})?")
_PLAIN = re.compile(r"[A-Za-z0-9][A-Za-z0-9 ._/@()+-]*")


def at_spot(inventory: tuple[NodeType, ...], cluster: ClusterSpec) -> tuple[NodeType, ...]:
    """The inventory with each node priced at its type's spot_usd_per_hour (`fasop search --spot`:
    every cost column then charges spot). A node type without a spot price is refused, naming
    them all: a plan priced half spot, half on-demand would be neither."""
    missing = list(dict.fromkeys(n.name for n in inventory if n.spot_usd_per_hour is None))
    if missing:
        raise SpecError(cluster.path, "spot_usd_per_hour", f"none for {', '.join(missing)}: --spot needs a spot "
                        "price for every node type (fasop prices --from vms.csv fills them)")
    return tuple(replace(n, usd_per_hour=n.spot_usd_per_hour) for n in inventory)


@dataclass(frozen=True)
class Offer:
    """One zone's prices of one node type ($/h; None: empty in the file)."""

    region: str
    zone: str
    usd_per_hour: float | None
    spot_usd_per_hour: float | None
    gpus_unpriced: bool = False
    """A GCP host row that names no accelerator (SkyPilot's a2/a3 rows): its GPUs' price is unknown."""


@dataclass(frozen=True, kw_only=True)
class NodePrice:
    node_type: str
    instance: str
    region: str | None
    usd_per_hour: float | None
    """Lowest on-demand price over the region's zones; None: none in the file (spec unchanged)."""
    spot_usd_per_hour: float | None
    zones: int
    """Zones of the region with a row for the instance."""
    old_usd_per_hour: float
    old_spot_usd_per_hour: float | None
    notes: tuple[str, ...] = ()


def _price(path: Path, line: int, column: str, text: str | None) -> float | None:
    text = (text or "").strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 <= value <= limits.USD_PER_HOUR:
        raise FasopError(f"{path}: line {line}: {column}: expected a price in $/h in [0, {limits.USD_PER_HOUR:g}], "
                         f"got {show(text)}")
    return value


def _count(text: str | None) -> str:
    text = (text or "").strip()
    try:
        return repr(float(text))
    except ValueError:
        return text


def read_offers(path: str | Path, instances: set[str]) -> dict[str, list[Offer]]:
    """Every zone's offer of each instance in `instances` (GCP host + accelerator rows joined)."""
    path = Path(path)
    text = decode_utf8(path, read_bounded(path, limits.VMS_CSV_BYTES, " vms.csv"))
    try:
        reader = csv.DictReader(io.StringIO(text, newline=""))
        header = reader.fieldnames or []
        missing = [c for c in REQUIRED if c not in header]
        if missing:
            raise FasopError(f"{path}: header: missing column {missing[0]!r} (a SkyPilot vms.csv has "
                             f"{', '.join(REQUIRED)})")
        hosts, accelerators = [], {}
        for line, row in enumerate(reader, start=2):
            if None in row or None in row.values():  # DictReader's restkey (extra cells) / restval (missing)
                raise FasopError(f"{path}: line {reader.line_num}: {'more' if None in row else 'fewer'} cells "
                                 f"than the header's {len(header)} columns")
            instance = (row.get("InstanceType") or "").strip()
            if instance in instances:
                hosts.append((line, row))
            elif not instance and (row.get("AcceleratorName") or "").strip():
                key = (row["AcceleratorName"].strip(), _count(row.get("AcceleratorCount")),
                       (row.get("AvailabilityZone") or "").strip())
                accelerators.setdefault(key, (line, row))
    except csv.Error as exc:
        raise FasopError(f"{path}: not a readable CSV file: {exc}") from None
    offers: dict[str, list[Offer]] = {}
    for line, row in hosts:
        offer = _offer(path, line, row, accelerators)
        if offer is not None:
            offers.setdefault(row["InstanceType"].strip(), []).append(offer)
    return offers


def _offer(path: Path, line: int, row: dict, accelerators: dict) -> Offer | None:
    price = _price(path, line, "Price", row.get("Price"))
    spot = _price(path, line, "SpotPrice", row.get("SpotPrice"))
    zone = (row.get("AvailabilityZone") or "").strip()
    name = (row.get("AcceleratorName") or "").strip()
    if accelerators and not name:  # GCP host row, GPUs not named: host + ? is no price
        return Offer((row.get("Region") or "").strip(), zone, None, None, gpus_unpriced=True)
    if accelerators and name:  # GCP: the host row's price excludes its GPUs
        found = accelerators.get((name, _count(row.get("AcceleratorCount")), zone))
        if found is None:
            return None
        gpu_line, gpu_row = found
        gpu_price = _price(path, gpu_line, "Price", gpu_row.get("Price"))
        gpu_spot = _price(path, gpu_line, "SpotPrice", gpu_row.get("SpotPrice"))
        price = None if price is None or gpu_price is None else _round(price + gpu_price)
        spot = None if spot is None or gpu_spot is None else _round(spot + gpu_spot)
    return Offer((row.get("Region") or "").strip(), zone, price, spot)


def _round(value: float) -> float:
    """A sum of two catalog prices, without float noise (43.06615000000001 -> 43.06615)."""
    return float(f"{value:.10g}")


def _lowest(values) -> float | None:
    values = [v for v in values if v is not None]
    return min(values) if values else None


def node_prices(cluster: ClusterSpec, path: str | Path, region: str | None = None) -> list[NodePrice]:
    """The price of each node type of `cluster` from the vms.csv at `path` (see the module doc)."""
    nodes = cluster.node_types.values()
    offers = read_offers(path, {n.instance for n in nodes if n.instance})
    return [_node_price(node, offers.get(node.instance, []), region) for node in nodes]


def _node_price(node, offers: list[Offer], region: str | None) -> NodePrice:
    base = dict(node_type=node.name, instance=node.instance, old_usd_per_hour=node.usd_per_hour,
                old_spot_usd_per_hour=node.spot_usd_per_hour)
    if not offers:
        return NodePrice(**base, region=region, usd_per_hour=None, spot_usd_per_hour=None, zones=0,
                         notes=(f"no row for instance {node.instance!r}: prices unchanged",))
    by_region: dict[str, list[Offer]] = {}
    for offer in offers:
        by_region.setdefault(offer.region, []).append(offer)
    if region is None:
        rank = lambda r: (_lowest(o.usd_per_hour for o in by_region[r]) is None,
                          _lowest(o.usd_per_hour for o in by_region[r]) or 0.0, r)
        region = min(by_region, key=rank)
    chosen = by_region.get(region, [])
    price = _lowest(o.usd_per_hour for o in chosen)
    spot = _lowest(o.spot_usd_per_hour for o in chosen)
    notes = []
    if not chosen:
        notes.append(f"no row in region {region!r} (regions: {', '.join(sorted(by_region))}): prices unchanged")
    elif all(o.gpus_unpriced for o in chosen):
        notes.append("its host rows name no accelerator, so the GPUs' rows cannot be added (a GCP GPU VM is "
                     "priced host + accelerator): prices unchanged")
    else:
        if price is None:
            notes.append("empty Price in every zone: usd_per_hour unchanged")
        if spot is None:
            notes.append("empty SpotPrice in every zone: spot_usd_per_hour unchanged")
    return NodePrice(**base, region=region, usd_per_hour=price, spot_usd_per_hour=spot,
                     zones=len({o.zone for o in chosen}), notes=tuple(notes))


# ----------------------------------------------------------------------------- the spec, line by line
def check_date(text: str, today: str | None = None) -> str:
    """`text` if it is a calendar date (YYYY-MM-DD or YYYY-MM) no later than `today` (UTC): a
    price cannot have been fetched in the future, and 9999-99 is no month."""
    import datetime

    if not _DATE.fullmatch(text):
        raise FasopError(f"--price-date: expected YYYY-MM-DD or YYYY-MM, got {show(text)}")
    try:
        date = datetime.date.fromisoformat(text if len(text) == 10 else text + "-01")
    except ValueError:
        raise FasopError(f"--price-date: {show(text)} is not a calendar date") from None
    today = today or datetime.datetime.now(datetime.timezone.utc).date().isoformat()
    if date.isoformat()[:len(text)] > today[:len(text)]:
        raise FasopError(f"--price-date: {show(text)} is after today ({today}): the date the vms.csv was fetched")
    return text


def _scalar(text: str) -> str:
    """`text` as a YAML scalar: plain where that reads back as the same string, else double-quoted."""
    if _PLAIN.fullmatch(text) and not text.endswith(" ") and not _DATE.fullmatch(text):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def updates(cluster: ClusterSpec, prices: list[NodePrice], source: str, price_date: str) -> dict[str, dict]:
    """Per node type, the new text (value, comment) of each price key it changes. price_date and
    price_source are written only where every price the node type has was updated; where one
    was not (the vms.csv has no spot price for it), the spec's date stays and each new price's
    comment names the date it was fetched."""
    result = {}
    for p in prices:
        new = {}
        where = f"{p.region}, lowest of {p.zones} zone{'s' * (p.zones != 1)}"
        if p.usd_per_hour is not None:
            new["usd_per_hour"] = (repr(p.usd_per_hour), f"# [vms.csv] {where}")
        if p.spot_usd_per_hour is not None:
            new["spot_usd_per_hour"] = (repr(p.spot_usd_per_hour), f"# [vms.csv] {where} (spot varies by zone and hour)")
        node = cluster.node_types.get(p.node_type)
        stale = p.usd_per_hour is None or (p.spot_usd_per_hour is None and node is not None
                                           and node.spot_usd_per_hour is not None)
        if new and cluster.estimator in CATALOG_ESTIMATORS and not stale:  # only catalog clusters carry them
            new["price_date"] = (price_date, "")
            new["price_source"] = (_scalar(f"SkyPilot vms.csv {source} ({p.region})"), "")
        elif new and stale:  # a price it did not update keeps its date: the new one says its own
            new = {k: (v, f"{c}, fetched {price_date}") for k, (v, c) in new.items()}
        if new:
            result[p.node_type] = new
    return result


def edit_spec(text: str, path: str, changes: dict[str, dict]) -> str:
    """`text` (a cluster spec) with the values of `changes` written into its node type blocks;
    every other line (comments included) as it was."""
    lines = text.splitlines(keepends=True)
    blocks = _node_blocks(lines, path)
    for name in reversed([n for n in blocks if n in changes]):  # from the end: insertions keep earlier indices
        start, end = blocks[name]
        _edit_block(lines, start, end, changes[name], path, name)
    return "".join(lines)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _content(line: str) -> bool:
    stripped = line.strip()
    return bool(stripped) and not stripped.startswith("#")


def _node_blocks(lines: list[str], path: str) -> dict[str, tuple[int, int]]:
    """Each node type's (first, end) line indices: its header line and the lines under it."""
    top = next((i for i, ln in enumerate(lines) if re.match(r"node_types:\s*(#.*)?$", ln)), None)
    if top is None:
        raise FasopError(f"{path}: node_types: not found as a block (`node_types:` on a line of its own)")
    blocks, current, indent = {}, None, None
    for i in range(top + 1, len(lines)):
        line = lines[i]
        if not _content(line):
            continue
        if _indent(line) == 0:
            break
        if indent is None:
            indent = _indent(line)
        if _indent(line) == indent:
            match = re.match(r"\s*([A-Za-z0-9_.-]+):\s*(#.*)?$", line)
            if not match:
                raise FasopError(f"{path}: line {i + 1}: cannot edit {line.strip()[:40]!r}: node types "
                                 "must be written as blocks")
            current = match.group(1)
            blocks[current] = (i, i + 1)
        elif current is not None:
            blocks[current] = (blocks[current][0], i + 1)
    return blocks


def _edit_block(lines: list[str], start: int, end: int, new: dict, path: str, name: str) -> None:
    key_re = re.compile(r"(?P<head>(?P<indent>\s+)(?P<key>[A-Za-z0-9_]+):\s*)(?P<value>.*?)(?P<comment>\s+#.*)?$")
    found, child_indent, last = {}, None, start
    for i in range(start + 1, end):
        match = key_re.match(lines[i].rstrip("\n"))
        if match and _content(lines[i]):
            child_indent = child_indent or match.group("indent")
            last = i
            if match.group("key") in new:
                found[match.group("key")] = (i, match)
    if child_indent is None:
        raise FasopError(f"{path}: node_types: {name}: cannot edit a node type without keys")
    inserted = []
    for key, (value, comment) in new.items():
        if key in found:
            i, match = found[key]
            head = f"{match.group('indent')}{key}: {value}"
            old = match.group("comment") or ""
            width = len(match.group("head")) + len(match.group("value")) + len(old) - len(old.lstrip())
            comment = comment or old.strip()
            lines[i] = (head.ljust(width - 1) + " " + comment if comment else head) + "\n"
        else:
            inserted.append(f"{child_indent}{key}: {value}" + (f"  {comment}" if comment else "") + "\n")
    if inserted and not lines[last].endswith("\n"):
        lines[last] += "\n"
    lines[last + 1:last + 1] = inserted
