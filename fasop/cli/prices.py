"""`fasop prices --cluster C --from vms.csv`: parser and command (logic in fasop/specs/prices.py)."""

from __future__ import annotations

import argparse
import datetime
import tempfile
from pathlib import Path


def add_parser(sub) -> None:
    p = sub.add_parser("prices", help="read node prices from a SkyPilot vms.csv into a cluster spec",
                       description="Look up each node type's instance in a SkyPilot catalog vms.csv (AWS or GCP "
                       "columns); print on-demand and spot $/h (lowest over the region's zones) next to the "
                       "spec's, and with --out write a copy of the spec with the new prices.")
    p.add_argument("--cluster", required=True, help="cluster spec: a name in cluster_specs/ or a .yaml path")
    p.add_argument("--from", dest="vms_csv", required=True, metavar="VMS.csv", help="SkyPilot catalog vms.csv")
    p.add_argument("--region", help="region to price in (default: each node type's cheapest on-demand region)")
    p.add_argument("--out", help="cluster spec to write with the new prices (default: print only)")
    p.add_argument("--price-date", metavar="YYYY-MM-DD",
                   help="price_date to write: when the vms.csv was fetched (default: today, UTC)")


def run(args: argparse.Namespace) -> int:
    from fasop.report.output import user_path
    from fasop.specs.prices import check_date, edit_spec, node_prices, updates
    from fasop.specs.files import decode_utf8, read_bounded
    from fasop.specs.load import load_cluster
    from fasop.specs.files import resolve
    from fasop.core import limits

    out = user_path(args.out, "--out")
    price_date = check_date(args.price_date) if args.price_date else datetime.datetime.now(datetime.timezone.utc).date().isoformat()
    cluster = load_cluster(args.cluster)
    prices = node_prices(cluster, args.vms_csv, args.region)
    _print_table(prices)
    if args.region and not any(p.zones for p in prices):  # a mistyped region prices nothing: not a success
        from fasop.core.errors import FasopError
        raise FasopError(f"--region: no node type of {args.cluster} has a row in region {args.region!r} of "
                         f"{args.vms_csv} (the notes above list the regions each has); nothing written")
    if out is None:
        return 0
    changes = updates(cluster, prices, Path(args.vms_csv).name, price_date)
    if not changes:
        from fasop.core.errors import FasopError
        where = f" in region {args.region!r}" if args.region else ""
        raise FasopError(f"--out: {args.vms_csv}: no node type of {args.cluster} has a price{where}; nothing written")
    spec_path = resolve(args.cluster, "cluster_specs")
    text = edit_spec(decode_utf8(spec_path, read_bounded(spec_path, limits.SPEC_BYTES)), str(spec_path), changes)
    _check_loads(text, out, changes)
    from fasop.report.results import write_atomic
    write_atomic(out, text)
    print(f"wrote {out} ({len(changes)} node type{'s' * (len(changes) != 1)} updated)")
    return 0


def _check_loads(text: str, out: Path, changes: dict) -> None:
    """The edited spec must load, with the new prices: checked on a temporary copy before --out is written."""
    from fasop.core.errors import FasopError
    from fasop.specs.load import load_cluster

    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "edited.yaml"
        copy.write_text(text)
        try:
            cluster = load_cluster(str(copy))
        except FasopError as exc:
            raise FasopError(f"--out: {out}: the edited spec does not load ({exc}); nothing written") from None
    for name, new in changes.items():
        node = cluster.node_types[name]
        got = {"usd_per_hour": node.usd_per_hour, "spot_usd_per_hour": node.spot_usd_per_hour}
        for key, value in got.items():
            if key in new and float(new[key][0]) != value:
                raise FasopError(f"--out: {out}: node_types: {name}: {key}: edited to {new[key][0]} but reads "
                                 f"back as {value}; nothing written")


def _money(value) -> str:
    return "-" if value is None else f"{value:.4f}"


def _print_table(prices) -> None:
    print(f"{'node type':<16} {'instance':<20} {'region':<16} {'zones':>5} {'$/h':>10} {'spot $/h':>10} "
          f"{'old $/h':>10} {'old spot':>10}")
    for p in prices:
        print(f"{p.node_type[:16]:<16} {p.instance[:20]:<20} {(p.region or '-')[:16]:<16} {p.zones:>5} "
              f"{_money(p.usd_per_hour):>10} {_money(p.spot_usd_per_hour):>10} "
              f"{_money(p.old_usd_per_hour):>10} {_money(p.old_spot_usd_per_hour):>10}")
    for p in prices:
        for note in p.notes:
            print(f"note: {p.node_type}: {note}")
    print("$/h and spot $/h: the lowest over the region's zones (spot varies by zone and hour)")
