"""`fasop prices`: SkyPilot vms.csv prices into a cluster spec (fasop/specs/prices.py, cli_prices.py).

The vms.csv files and the cluster spec are written here by hand; expected prices are computed by
hand from their rows (lowest over the chosen region's zones; GCP host + accelerator row)."""

from __future__ import annotations

import os

import pytest

from fasop.cli.command import main
from fasop.core import limits
from fasop.pareto.sweep import node_prices
from fasop.specs.load import load_cluster

AWS_CSV = """\
InstanceType,AcceleratorName,AcceleratorCount,vCPUs,MemoryGiB,GpuInfo,Price,SpotPrice,Region,AvailabilityZone,Arch,Extra
p5.48xlarge,H100,8,192,2048,"{'Gpus': [{'Name': 'H100'}]}",55.04,20.5,us-east-1,us-east-1a,x86_64,x
p5.48xlarge,H100,8,192,2048,,55.04,14.25,us-east-1,us-east-1b,x86_64,x
p5.48xlarge,H100,8,192,2048,,68.8,12.0,ap-northeast-1,ap-northeast-1a,x86_64,x
p4d.24xlarge,A100,8,96,1152,,21.95764,,us-east-1,us-east-1a,x86_64,x
p4d.24xlarge,A100,8,96,1152,,20.0,9.5,us-west-2,us-west-2a,x86_64,x
p4d.24xlarge,A100,8,96,1152,,20.5,8.75,us-west-2,us-west-2b,x86_64,x
g5.48xlarge,A10G,8,192,768,,16.288,5.0,us-east-1,us-east-1a,x86_64,x
"""

GCP_CSV = """\
InstanceType,vCPUs,MemoryGiB,AcceleratorName,AcceleratorCount,GpuInfo,Region,AvailabilityZone,Price,SpotPrice
a3-highgpu-8g,208,1872,H100,8,,us-central1,us-central1-a,9.46006,3.1
a3-highgpu-8g,208,1872,H100,8,,us-central1,us-central1-b,9.46006,2.9
,,,H100,8,,us-central1,us-central1-a,33.60609,22.8008
,,,H100,8,,us-central1,us-central1-b,33.60609,23.0
,,,H100,4,,us-central1,us-central1-a,1.0,1.0
a3-highgpu-8g,208,1872,H100,8,,us-east4,us-east4-a,10.0,4.0
,,,H100,8,,us-east4,us-east4-a,78.37,30.0
a2-ultragpu-8g,96,1360,A100-80GB,8,,us-central1,us-central1-a,8.79698,
,,,A100-80GB,8,,us-central1,us-central1-a,14.76958,6.0
"""

SPEC = """\
# A hand-written catalog cluster (comments must survive `fasop prices --out`).
estimator: analytic

node_types:
  p5:
    instance: p5.48xlarge       # H100 x 8
    gpu: H100-SXM
    gpus_per_node: 8
    inter_node_gbit_per_s: 3200 # EFA
    usd_per_hour: 50.0          # an old price
    spot_usd_per_hour: null     # not retrieved
    price_date: 2025-06
    price_source: by hand
  # p4d below has no spot key: one is added
  p4d:
    instance: p4d.24xlarge
    gpu: A100-SXM4-40GB
    gpus_per_node: 8
    inter_node_gbit_per_s: 400
    usd_per_hour: 30.0
    price_date: 2025-06
    price_source: by hand
  g6:
    instance: g6.48xlarge       # not in the vms.csv
    gpu: L4
    gpus_per_node: 8
    inter_node_gbit_per_s: 100
    usd_per_hour: 13.3504
    spot_usd_per_hour: null
    price_date: 2025-06
    price_source: by hand
"""

GCP_SPEC = """\
estimator: analytic
node_types:
  a3-highgpu-8g:
    instance: a3-highgpu-8g
    gpu: H100-SXM
    gpus_per_node: 8
    inter_node_gbit_per_s: 800
    usd_per_hour: 1.0
    spot_usd_per_hour: null
    price_date: 2025-06
    price_source: x
  a2-ultragpu-8g:
    instance: a2-ultragpu-8g
    gpu: A100-SXM4-80GB
    gpus_per_node: 8
    inter_node_gbit_per_s: 100
    usd_per_hour: 2.0
    spot_usd_per_hour: null
    price_date: 2025-06
    price_source: x
"""


@pytest.fixture()
def files(tmp_path):
    paths = {}
    for name, text in (("aws.csv", AWS_CSV), ("gcp.csv", GCP_CSV), ("spec.yaml", SPEC), ("gcp.yaml", GCP_SPEC)):
        paths[name] = tmp_path / name
        paths[name].write_text(text)
    return paths


def _prices(cluster, csv, region=None):
    from fasop.specs.prices import node_prices as vms_prices
    return {p.node_type: p for p in vms_prices(load_cluster(str(cluster)), csv, region)}


def test_aws_default_region_is_the_cheapest_on_demand(files):
    got = _prices(files["spec.yaml"], files["aws.csv"])
    # p5: us-east-1 55.04 < ap-northeast-1 68.8; spot min(20.5, 14.25) in us-east-1 (not 12.0 elsewhere)
    assert (got["p5"].region, got["p5"].usd_per_hour, got["p5"].spot_usd_per_hour, got["p5"].zones) == \
        ("us-east-1", 55.04, 14.25, 2)
    # p4d: us-west-2 min(20.0, 20.5) = 20.0 < 21.95764; spot min(9.5, 8.75)
    assert (got["p4d"].region, got["p4d"].usd_per_hour, got["p4d"].spot_usd_per_hour) == ("us-west-2", 20.0, 8.75)
    assert got["g6"].usd_per_hour is None and "no row for instance 'g6.48xlarge'" in got["g6"].notes[0]


def test_aws_named_region_and_empty_spot(files):
    got = _prices(files["spec.yaml"], files["aws.csv"], "us-east-1")
    assert (got["p4d"].usd_per_hour, got["p4d"].spot_usd_per_hour) == (21.95764, None)
    assert any("empty SpotPrice" in n for n in got["p4d"].notes)
    missing = _prices(files["spec.yaml"], files["aws.csv"], "eu-west-1")["p5"]
    assert missing.usd_per_hour is None and "no row in region 'eu-west-1'" in missing.notes[0]


def test_gcp_host_plus_accelerator_rows_of_the_same_zone(files):
    got = _prices(files["gcp.yaml"], files["gcp.csv"])
    a3 = got["a3-highgpu-8g"]
    # us-central1: 9.46006 + 33.60609 = 43.06615 (both zones); spot min(3.1 + 22.8008, 2.9 + 23.0) = 25.9
    # us-east4: 10.0 + 78.37 = 88.37, dearer; the H100 x 4 row is another accelerator count
    assert (a3.region, a3.usd_per_hour, a3.spot_usd_per_hour, a3.zones) == ("us-central1", 43.06615, 25.9, 2)
    a2 = got["a2-ultragpu-8g"]
    assert (a2.usd_per_hour, a2.spot_usd_per_hour) == (23.56656, None)  # 8.79698 + 14.76958; host spot empty


def test_out_writes_a_spec_that_loads_keeps_comments_and_prices_spot(files, tmp_path, capsys):
    out = tmp_path / "new" / "priced.yaml"
    assert main(["prices", "--cluster", str(files["spec.yaml"]), "--from", str(files["aws.csv"]),
                 "--out", str(out), "--price-date", "2026-11-25"]) == 0
    text = out.read_text()
    printed = capsys.readouterr().out
    assert "p5.48xlarge" in printed and "wrote" in printed
    old_lines = SPEC.splitlines()
    kept = [ln for ln in old_lines if not any(k in ln for k in ("usd_per_hour", "price_date", "price_source"))]
    assert [ln for ln in text.splitlines() if ln in kept] == kept  # every other line, in order
    assert "    usd_per_hour: 55.04         # [vms.csv] us-east-1, lowest of 2 zones" in text
    assert "price_source: SkyPilot vms.csv aws.csv (us-west-2)" in text
    cluster = load_cluster(str(out))
    p5, p4d, g6 = (cluster.node_types[n] for n in ("p5", "p4d", "g6"))
    assert (p5.usd_per_hour, p5.spot_usd_per_hour) == (55.04, 14.25)
    assert (p4d.usd_per_hour, p4d.spot_usd_per_hour) == (20.0, 8.75)  # spot key inserted
    assert (g6.usd_per_hour, g6.spot_usd_per_hour) == (13.3504, None)  # untouched
    prices, on_demand = node_prices(cluster, ["p5", "p4d", "g6"], spot=True)  # what `pareto --spot` charges
    assert prices == {"p5": 14.25, "p4d": 8.75, "g6": 13.3504} and on_demand == ("g6",)
    assert main(["prices", "--cluster", str(out), "--from", str(files["aws.csv"]), "--out", str(out),
                 "--price-date", "2026-11-25"]) == 0
    assert out.read_text() == text  # a second run over its own output changes nothing


def test_without_out_nothing_is_written(files, tmp_path, capsys):
    before = sorted(os.listdir(tmp_path))
    assert main(["prices", "--cluster", str(files["spec.yaml"]), "--from", str(files["aws.csv"])]) == 0
    assert sorted(os.listdir(tmp_path)) == before
    assert "lowest over the region's zones" in capsys.readouterr().out


def _error(capsys, argv) -> str:
    assert main(argv) == 2
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("fasop: error: ") and "Traceback" not in captured.err
    return lines[0]


@pytest.mark.parametrize("csv_text, message", [
    (AWS_CSV.replace("55.04,14.25", "55.04,cheap"), "line 3: SpotPrice: expected a price in $/h"),
    (AWS_CSV.replace("20.0,9.5", "-1,9.5"), "line 6: Price: expected a price in $/h"),
    (AWS_CSV.replace("20.0,9.5", "inf,9.5"), "line 6: Price: expected a price"),
    (AWS_CSV.replace(",SpotPrice,", ",Spot,"), "header: missing column 'SpotPrice'"),
    ("", "header: missing column 'InstanceType'"),
    (b"InstanceType\xff\n", "line 1: not UTF-8 text"),
])
def test_bad_vms_csv_is_one_line_exit_2(files, tmp_path, capsys, csv_text, message):
    bad = tmp_path / "bad.csv"
    bad.write_bytes(csv_text if isinstance(csv_text, bytes) else csv_text.encode())
    out = tmp_path / "out.yaml"
    line = _error(capsys, ["prices", "--cluster", str(files["spec.yaml"]), "--from", str(bad), "--out", str(out)])
    assert f"{bad}: " in line and message in line
    assert not out.exists()


def test_other_bad_input_is_one_line_exit_2(files, tmp_path, capsys, monkeypatch):
    spec, csv = str(files["spec.yaml"]), str(files["aws.csv"])
    assert "No such file" in _error(capsys, ["prices", "--cluster", spec, "--from", str(tmp_path / "none.csv")])
    assert "no spec named 'nope'" in _error(capsys, ["prices", "--cluster", "nope", "--from", csv])
    assert "--price-date" in _error(capsys, ["prices", "--cluster", spec, "--from", csv, "--out",
                                             str(tmp_path / "o.yaml"), "--price-date", "yesterday"])
    link = tmp_path / "link.yaml"
    link.symlink_to(files["spec.yaml"])
    assert "symbolic link" in _error(capsys, ["prices", "--cluster", spec, "--from", csv, "--out", str(link)])
    assert files["spec.yaml"].read_text() == SPEC
    monkeypatch.setattr(limits, "VMS_CSV_BYTES", 100)
    assert "larger than fasop's limit of 100 bytes" in _error(capsys, ["prices", "--cluster", spec, "--from", csv])


FASOP_SPEC = """\
estimator: fasop-2024
links:
  p2p_inter_node_divisor: 1.05
  p2p_intra_node_divisor: 3.5
memory:
  overhead_factor: 1.10
node_types:
  a100:
    instance: p4d.24xlarge       # a comment
    gpu: A100
    gpus_per_node: 4
    memory_limit_gib: 39.59
    intra_node_gbit_per_s: 1840
    inter_node_gbit_per_s: 40
    intra_node_shared: false
    usd_per_hour: 32.7726        # the paper's price
"""


def test_a_fasop_2024_cluster_gets_prices_without_date_or_source_keys(files, tmp_path, capsys):
    spec, out = tmp_path / "fasop.yaml", tmp_path / "fasop-priced.yaml"
    spec.write_text(FASOP_SPEC)
    assert main(["prices", "--cluster", str(spec), "--from", str(files["aws.csv"]), "--out", str(out)]) == 0
    text = out.read_text()
    assert "price_date" not in text and "price_source" not in text  # keys a fasop-2024 spec does not know
    node = load_cluster(str(out)).node_types["a100"]
    assert (node.usd_per_hour, node.spot_usd_per_hour) == (20.0, 8.75)  # us-west-2, as above
    assert text.startswith(FASOP_SPEC.split("    usd_per_hour")[0])


def test_gcp_host_rows_naming_no_accelerator_leave_the_prices(files, tmp_path):
    """SkyPilot's real gcp/vms.csv names no accelerator on a2/a3 host rows; the host price alone
    (9.46 of the 43.07 an a3-highgpu-8g costs) would be silently wrong, so nothing changes."""
    path = tmp_path / "gcp-real.csv"
    path.write_text(GCP_CSV.replace("a3-highgpu-8g,208,1872,H100,8,", "a3-highgpu-8g,208,1872,,,"))
    got = _prices(files["gcp.yaml"], path)["a3-highgpu-8g"]
    assert (got.usd_per_hour, got.spot_usd_per_hour) == (None, None)
    assert "name no accelerator" in got.notes[0]
