"""The planner's figures from a compiled program's text (bert_jax/plan/figures.py): collective
bytes by ring algorithm, within and across slices, loops counted per trip; both roofline bounds;
the documented topologies (chips.py)."""

# ruff: noqa: E501 (HLO instruction lines are kept whole, as the compiler writes them)

import numpy as np
import pytest

from bert_jax import cli
from bert_jax.plan import chips, figures


def test_replica_groups_read_the_same_in_all_three_spellings():
    """XLA writes a collective's groups as lists, as an iota (optionally transposed) or over a
    named mesh; each spelling of one grouping reads back as the same groups."""
    ids = np.arange(8).reshape(2, 4)  # a 2 x 4 mesh, devices in order
    along_rows = [[0, 1, 2, 3], [4, 5, 6, 7]]  # groups over the second axis
    along_cols = [[0, 4], [1, 5], [2, 6], [3, 7]]  # groups over the first
    read = figures.replica_groups
    assert read("replica_groups={{0,1,2,3},{4,5,6,7}}, x", 8) == along_rows
    assert read("replica_groups=[2,4]<=[8], x", 8) == along_rows
    assert read("replica_groups=mesh['a'=2,'b'=4] {'b'}, x", 8) == along_rows
    assert read("replica_groups={{0,4},{1,5},{2,6},{3,7}}", 8) == along_cols
    assert read("replica_groups=[4,2]<=[2,4]T(1,0), x", 8) == along_cols
    assert read("replica_groups=mesh['a'=2,'b'=4] {'a'}, x", 8) == along_cols
    assert read("replica_groups=mesh['a'=2,'b'=4] {'a','b'}", 8) == [ids.ravel().tolist()]
    assert read("replica_groups={}, to_apply=%add", 8) == [list(range(8))]
    assert read("channel_id=1, to_apply=%add", 8) is None


def _program(*lines: str) -> str:
    """Instruction lines as a compiled program's entry computation."""
    return "\n".join(["ENTRY %main () -> () {", *lines, "}"])


def test_collective_bytes_follow_ring_algorithms_and_split_ici_from_dcn():
    lines = (
        # 4 MB of bf16 gradients all-reduced over 4 devices: 2 x 3/4 of it per device.
        "  %ar = bf16[1024,2048]{1,0} all-reduce(%g), replica_groups={{0,1,2,3}}, x",
        # A tuple (two buffers, one op) counts both.
        "  %ar2 = (f32[256]{0}, f32[256]{0}) all-reduce(%a, %b), replica_groups=[1,4]<=[4]",
        # all-gather's result is the whole buffer: 3/4 of it arrives from the others.
        "  %ag = f32[4,1024]{1,0} all-gather(%p), replica_groups=mesh['x'=4] {'x'}, x",
        # An async start holds operand and result: the larger buffer, once.
        "  %ags = (f32[1,1024]{1,0}, f32[4,1024]{1,0}) all-gather-start(%p), "
        "replica_groups={{0,1,2,3}}",
        "  %agd = f32[4,1024]{1,0} all-gather-done(%ags)",
        # reduce-scatter's result is 1/4 of the buffer.
        "  %rs = f32[256]{0} reduce-scatter(%q), replica_groups={{0,1,2,3}}, dimensions={0}",
        "  %cp = f32[100]{0} collective-permute(%r), source_target_pairs={{0,1},{1,0}}",
    )
    one_slice = figures.collectives(_program(*lines), [0, 0, 0, 0])
    mb = 1024 * 2048 * 2
    assert one_slice.ici_bytes["all-reduce"] == pytest.approx(1.5 * (mb + 2 * 256 * 4))
    assert one_slice.ici_bytes["all-gather"] == pytest.approx(2 * 0.75 * 4 * 1024 * 4)
    assert one_slice.ici_bytes["reduce-scatter"] == pytest.approx(0.75 * 1024 * 4)
    assert one_slice.ici_bytes["collective-permute"] == 400
    assert one_slice.counts == {
        "all-reduce": 2,
        "all-gather": 2,
        "reduce-scatter": 1,
        "collective-permute": 1,
    }
    assert one_slice.dcn_bytes == 0 and one_slice.unread == 0
    # Devices 0, 1 on one slice and 2, 3 on another: each all-reduce runs within a slice (a ring
    # of 2) and across the 2 slices over DCN with half the buffer per chip.
    two = figures.collectives(_program(lines[0]), [0, 0, 1, 1])
    assert two.ici_bytes["all-reduce"] == pytest.approx(2 * 0.5 * mb)
    assert two.dcn_bytes == pytest.approx(2 * 0.5 * mb / 2)
    # What libtpu writes for two slices: the all-reduce stays within the slice and its result
    # goes to the megascale runtime, which all-reduces it across slices over DCN.
    megascale = (
        "  %send = (f32[1,1,128]{2,1,0:T(1,128)}, u32[], token[]) send(%all-reduce.69, "
        "%after-all), channel_id=3, is_host_transfer=true, frontend_attributes={_xla_host_"
        'transfer_handler_name="xla_megascale_runtime",_xla_megascale_reduce_operation="SUM",'
        '_xla_megascale_transfer_type="ALL_REDUCE"}'
    )
    dcn = figures.collectives(_program(megascale), [0, 0, 1, 1])
    assert dcn.dcn_bytes == pytest.approx(2 * 0.5 * 128 * 4) and dcn.ici_bytes == {}
    assert dcn.counts == {"DCN ALL_REDUCE": 1}


def test_collectives_in_a_loop_count_once_per_trip():
    hlo = """HloModule m

%sum (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

%body (p: (s32[], f32[1024])) -> (s32[], f32[1024]) {
  %p = (s32[], f32[1024]{0}) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %g = f32[1024]{0} get-tuple-element(%p), index=1
  %ar = f32[1024]{0} all-reduce(%g), replica_groups={{0,1,2,3}}, to_apply=%sum
  ROOT %t = (s32[], f32[1024]{0}) tuple(%i, %ar)
}

%cond (q: (s32[], f32[1024])) -> pred[] {
  %q = (s32[], f32[1024]{0}) parameter(0)
  %j = s32[] get-tuple-element(%q), index=0
  %n = s32[] constant(3)
  ROOT %lt = pred[] compare(%j, %n), direction=LT
}

ENTRY %main (x: (s32[], f32[1024])) -> (s32[], f32[1024]) {
  %x = (s32[], f32[1024]{0}) parameter(0)
  ROOT %w = (s32[], f32[1024]{0}) while(%x), condition=%cond, body=%body, backend_config={"known_trip_count":{"n":"3"}}
}
"""
    coll = figures.collectives(hlo, [0, 0, 0, 0])
    assert coll.counts == {"all-reduce": 3}
    assert coll.ici_bytes["all-reduce"] == pytest.approx(3 * 1.5 * 4096)


def test_the_serial_roofline_adds_collectives_and_the_overlapped_one_hides_them():
    chip = chips.CHIPS["v5e"]
    none = figures.Collectives({"all-reduce": 0.0}, 0.0, {}, 0)
    cost = {"flops": 197e12, "bytes accessed": 819e9 / 2, "optimal_seconds": -3.0}
    roof = figures.roofline(cost, none, chip)
    assert roof.terms == {"compute": 1.0, "HBM": 0.5, "ICI": 0.0, "DCN": 0.0}
    assert (roof.serial_s, roof.serial_bound) == (1.0, "compute")
    assert (roof.overlapped_s, roof.overlapped_bound) == (1.0, "compute")
    # One direction of 400 GB/s bidirectional ICI: 2 s; DCN 3.125 GB/s per chip: 1 s.
    ici = figures.Collectives({"all-reduce": 400e9}, 3.125e9, {}, 0)
    roof = figures.roofline(cost, ici, chip)
    assert (roof.serial_s, roof.serial_bound) == (pytest.approx(1.0 + 2.0 + 1.0), "ICI")
    assert (roof.overlapped_s, roof.overlapped_bound) == (pytest.approx(2.0 + 1.0), "ICI")
    # The compiler's own estimate where it gives one; none where it writes a negative number.
    assert figures.compiler_seconds(cost) is None
    assert figures.compiler_seconds({**cost, "optimal_seconds": 0.25}) == 0.25


def test_topology_names_map_to_documented_slices():
    assert chips.parse("v5p-64").shape == "2x4x4"  # TensorCores: 32 chips
    assert chips.parse("v4-32").num_chips == 16
    assert chips.parse("v5e-256").shape == "16x16"  # chips
    assert chips.parse("v5litepod-16").shape == "4x4"
    assert chips.parse("v5e-1").num_chips == chips.parse("v6e-1").num_chips == 1
    assert chips.parse("v5e:2x4").num_chips == 8
    assert chips.parse("v5e-16", num_slices=2).num_chips == 32
    # TPU7x counts TensorCores as v5p does, but each is a device (no megacore): figures per device.
    assert chips.parse("tpu7x-8").shape == chips.parse("v7x:2x2x1").shape == "2x2x1"
    assert (chips.parse("tpu7x-16").num_chips, chips.parse("tpu7x-16").num_devices) == (8, 16)
    assert chips.CHIPS["tpu7x"].hbm_bytes == 96 * chips.GIB  # half a chip's 192 GiB
    assert chips.parse("v5p-8").num_devices == chips.parse("v5p-8").num_chips == 4
    # v3 (the original BERT's TPUs): two TensorCores a chip, each a device; the v3 page's shapes.
    assert (chips.parse("v3-8").shape, chips.parse("v3-8").num_devices) == ("2x2", 8)
    assert (chips.parse("v3-2048").shape, chips.parse("v3-2048").num_chips) == ("32x32", 1024)
    assert chips.CHIPS["v3"].hbm_bytes == 16 * chips.GIB  # half a chip's 32 GiB
    assert {"v4-8", "v5p-8", "v5e-1", "v6e-1", "v4-1024", "v5e-256", "tpu7x-8", "v3-8"} <= set(
        chips.DOCUMENTED
    )
    for name in chips.DOCUMENTED:
        assert chips.parse(name).num_chips >= 1
    bad_ones = (
        "v5p-63",
        "v2-8",
        "v3-2",
        "v3-16",
        "v3:2x2x1",
        "v5e:2x2x2",
        "tpu",
        "v5e:0x4",
        "v4-2",
    )
    for bad in bad_ones:
        with pytest.raises(cli.UserError, match=rf"^--topology={bad}: "):
            chips.parse(bad)
    with pytest.raises(cli.UserError, match="--num_slices=0"):
        chips.parse("v5e-4", num_slices=0)
