"""Where the HBM bytes go (bert_jax/plan/hbm.py) on a handwritten HLO module whose every byte is
counted by hand: a fusion with an operand in VMEM and a tiled one, an async copy, a collective,
a slice, an in-place scatter, a loop counted by its condition and one by the compiler's trip
count with an in-place update in its body, a call, and the optimizer's conditional."""

# ruff: noqa: E501 (HLO instruction lines are kept whole, as the compiler writes them)

import pytest

from bert_jax.plan import figures, hbm, hlo

MODULE = """HloModule step, entry_computation_layout={()->()}

%fused_add (param_0: f32[256], param_1: f32[256]) -> f32[256] {
  %param_0 = f32[256]{0:S(1)} parameter(0)
  %param_1 = f32[256]{0:T(1024)} parameter(1)
  ROOT %add.0 = f32[256]{0} add(%param_0, %param_1)
}

%fused_dus (param_0.1: f32[8,256], param_1.1: f32[1,256], param_2: s32[]) -> f32[8,256] {
  %param_0.1 = f32[8,256]{1,0} parameter(0)
  %param_1.1 = f32[1,256]{1,0} parameter(1)
  %param_2 = s32[] parameter(2)
  %zero.1 = s32[] constant(0)
  ROOT %dus = f32[8,256]{1,0} dynamic-update-slice(%param_0.1, %param_1.1, %param_2, %zero.1)
}

%body (p: (s32[], f32[8,256], f32[256])) -> (s32[], f32[8,256], f32[256]) {
  %p = (s32[], f32[8,256]{1,0}, f32[256]{0}) parameter(0)
  %i = s32[] get-tuple-element(%p), index=0
  %acc = f32[8,256]{1,0} get-tuple-element(%p), index=1
  %x.1 = f32[256]{0} get-tuple-element(%p), index=2
  %row = f32[1,256]{1,0} bitcast(%x.1)
  %upd = f32[8,256]{1,0} fusion(%acc, %row, %i), kind=kLoop, calls=%fused_dus, metadata={op_name="jit(step)/while/body/transpose(jvp(attention))/dynamic_update_slice"}
  %one = s32[] constant(1)
  %next = s32[] add(%i, %one), metadata={op_name="jit(step)/while/body/add"}
  ROOT %t = (s32[], f32[8,256]{1,0}, f32[256]{0}) tuple(%next, %upd, %x.1)
}

%cond (q: (s32[], f32[8,256], f32[256])) -> pred[] {
  %q = (s32[], f32[8,256]{1,0}, f32[256]{0}) parameter(0)
  %j = s32[] get-tuple-element(%q), index=0
  %n = s32[] constant(8)
  ROOT %lt = pred[] compare(%j, %n), direction=LT
}

%branch_keep (b: f32[1024]) -> f32[1024] {
  %b = f32[1024]{0} parameter(0)
  ROOT %kept = f32[1024]{0} copy(%b)
}

%branch_update (a: f32[1024]) -> f32[1024] {
  %a = f32[1024]{0} parameter(0)
  ROOT %m = f32[1024]{0} multiply(%a, %a), metadata={op_name="jit(step)/cond/branch_1_fun/optimizer/mul"}
}

%head (h: f32[256]) -> f32[256] {
  %h = f32[256]{0} parameter(0)
  ROOT %neg = f32[256]{0} negate(%h), metadata={op_name="jit(step)/jvp(mlm_head)/neg"}
}

%sum (l: f32[], r: f32[]) -> f32[] {
  %l = f32[] parameter(0)
  %r = f32[] parameter(1)
  ROOT %s = f32[] add(%l, %r)
}

ENTRY %main (x: f32[256], y: f32[256], s: f32[1024], big: f32[8,256], flag: pred[], idx: s32[4,1], vals: f32[4]) -> f32[1024] {
  %x = f32[256]{0} parameter(0)
  %y = f32[256]{0:T(1024)} parameter(1)
  %s.1 = f32[1024]{0} parameter(2)
  %big = f32[8,256]{1,0} parameter(3)
  %flag = pred[] parameter(4)
  %idx = s32[4,1]{1,0} parameter(5)
  %vals = f32[4]{0} parameter(6)
  %cs = (f32[256]{0:S(1)}, f32[256]{0}, u32[]{:S(2)}) copy-start(%x)
  %cd = f32[256]{0:S(1)} copy-done(%cs)
  %f = f32[256]{0} fusion(%cd, %y), kind=kLoop, calls=%fused_add, metadata={op_name="jit(step)/jvp(ffn)/add"}
  %ar = f32[256]{0} all-reduce(%f), replica_groups={{0,1,2,3}}, to_apply=%sum
  %sl = f32[2,256]{1,0} slice(%big), slice={[0:2], [0:256]}, metadata={op_name="jit(step)/transpose(jvp(embeddings))/slice"}
  %sc = f32[1024]{0} scatter(%s.1, %idx, %vals), update_window_dims={}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=%sum, metadata={op_name="jit(step)/transpose(jvp(embeddings))/scatter-add"}
  %pc = bf16[256]{0} convert(%x), metadata={op_name="state[\\'params\\'][\\'w\\']"}
  %c = f32[256]{0} call(%ar), to_apply=%head
  %zero = s32[] constant(0)
  %init = (s32[], f32[8,256]{1,0}, f32[256]{0}) tuple(%zero, %big, %f)
  %w = (s32[], f32[8,256]{1,0}, f32[256]{0}) while(%init), condition=%cond, body=%body
  %w2 = (s32[], f32[8,256]{1,0}, f32[256]{0}) while(%init), condition=%cond, body=%body, backend_config={"known_trip_count":{"n":"3"}}
  ROOT %u = f32[1024]{0} conditional(%flag, %sc, %sc), branch_computations={%branch_keep, %branch_update}
}
"""

# One run of each counted instruction, by hand (4 bytes a float; HBM only):
COPY_START = 1024  # reads x from HBM; its destination is in VMEM (S(1)), its 2nd element is x
FUSION_ADD = 4 * 1024 + 1024  # y padded to one 1024-wide tile, the result; %cd is in VMEM
ALL_REDUCE = 1024 + 1024
SLICE = 2 * 256 * 4 * 2  # reads the 2 rows it keeps (not all 8), writes them
SCATTER = 16 + 16 + 2 * 16  # indices, updates, and the 4 rows it updates read and written
CONVERT = 1024 + 512
CALLED_NEGATE = 1024 + 1024
DUS_FUSION = 1024 + 4 + 1024  # the row and the index read, the row written (in place)
LOOP_ADD = 4 + 4 + 4  # scalars without a tiling
OPTIMIZER = 3 * 4096  # multiply(a, a): the costlier branch (the copy moves 2 x 4096)


def test_every_byte_is_where_it_was_counted_by_hand():
    a = hbm.attribute(MODULE)
    trips = 8 + 3  # the condition's bound, the compiler's known_trip_count
    assert a.groups == {
        "attention": DUS_FUSION * trips,
        "optimizer update": OPTIMIZER,
        "feed-forward": COPY_START + FUSION_ADD,  # the copy goes to the op that uses it
        "embedding gradient": SLICE + SCATTER,
        "MLM head and loss": CALLED_NEGATE,
        "collectives: all-reduce": ALL_REDUCE,
        "parameter casts and copies": CONVERT,
        "other": LOOP_ADD * trips,
    }
    assert list(a.groups.values()) == sorted(a.groups.values(), reverse=True)
    assert a.total_bytes == sum(a.groups.values())
    # On chip: the copy's VMEM destination and its u32 context, the fusion's VMEM operand.
    assert a.onchip_bytes == (1024 + 4) + 1024
    assert a.onchip_groups["feed-forward"] == a.onchip_bytes
    by_name = {op.name: op for op in a.ops}
    assert set(by_name) == {"cs", "f", "ar", "sl", "sc", "pc", "neg", "upd", "next", "m"}
    # The loop body's update, listed once per loop that runs it, with each loop's runs.
    assert sorted(op.times for op in a.ops if op.name == "upd") == [3, 8]
    assert by_name["f"].opcode == "fusion (kLoop)"
    assert by_name["f"].result == "f32[256]" and by_name["f"].operands == "f32[256], f32[256]"
    assert [op.bytes for op in a.ops] == sorted((op.bytes for op in a.ops), reverse=True)
    assert a.notes == [
        "while w: its body body counted 8 times (its condition's bound)",
        "while w2: its body body counted 3 times (known_trip_count)",
        "conditional u: its costliest branch branch_update counted, the other not",
    ]
    top = a.to_json(top=2)
    assert [(op["name"], op["bytes"]) for op in top["top"]] == [
        ("upd", 8 * DUS_FUSION),
        ("m", OPTIMIZER),
    ]
    assert top["total_bytes"] == a.total_bytes and top["groups"] == a.groups


def test_a_loop_without_a_bound_is_counted_once_and_says_so():
    text = MODULE.replace("%n = s32[] constant(8)", "%n = s32[] get-tuple-element(%q), index=0")
    a = hbm.attribute(text)
    assert "while w: its body body counted 1 times (trip count unknown: counted once)" in a.notes


@pytest.mark.parametrize(
    "shape, size, space",
    [
        ("f32[30522,768]{1,0:T(8,128)}", 30528 * 768 * 4, 0),  # rows padded to 8
        ("bf16[16,20,768]{2,1,0:T(8,128)(2,1)}", 16 * 24 * 768 * 2, 0),  # sub-tile packs
        ("f32[768]{0:T(1024)S(1)}", 1024 * 4, 1),  # VMEM
        ("bf16[3,768]{1,0:T(4,128)(2,1)}", 4 * 768 * 2, 0),
        ("f32[2,64]{0,1:T(8,128)}", 128 * 64 * 4, 0),  # dimension 0 is the minor one
        ("f32[]{:T(128)}", 128 * 4, 0),  # a scalar takes a tile
        ("f32[64]{0:T(8,128)}", 8 * 128 * 4, 0),  # a 2-D tile on one dimension
        ("pred[10]", 10, 0),
        ("s32[]", 4, 0),
        ("u32[]{:S(2)}", 4, 2),
    ],
)
def test_arrays_are_counted_as_stored(shape, size, space):
    (array,) = hlo.arrays(shape)
    assert (array.nbytes, array.memory_space) == (size, space)


def test_an_instruction_line_with_a_tuple_shape_reads_whole():
    line = (
        "  ROOT %slice-start.4 = ((f32[30522,768]{1,0:T(8,128)}), f32[7632,768]{1,0:T(8,128)S(1)}"
        ", s32[]{:S(2)}) slice-start(%get-tuple-element.7), slice={[0:7632], [0:768]}, "
        'metadata={op_name="jit(f)/x" stack_frame_id=3}'
    )
    ins = hlo.parse_instruction(line)
    assert (ins.name, ins.opcode, ins.operands, ins.root) == (
        "slice-start.4",
        "slice-start",
        ["get-tuple-element.7"],
        True,
    )
    assert [str(a) for a in hlo.arrays(ins.shape)] == ["f32[30522,768]", "f32[7632,768]", "s32[]"]
    assert ins.op_name == "jit(f)/x"
    cond = hlo.parse_instruction(
        "  %c = f32[4]{0} conditional(%p, %a, %b), branch_computations={%one, %two.1}"
    )
    assert cond.called("branch_computations") == ["one", "two.1"]
    assert hlo.parse_instruction("  %w = s32[] while(%i), condition=%c, body=%b").called(
        "body"
    ) == ["b"]
    assert hlo.parse_instruction("HloModule m") is None


@pytest.mark.parametrize(
    "op_name, group",
    [
        ("jit(train_step)/transpose(jvp(embeddings))/scatter-add", "embedding gradient"),
        ("jit(train_step)/jvp(embeddings)/jit(_take)/gather", "embedding forward"),
        ("jit(train_step)/cond/branch_1_fun/optimizer/mul", "optimizer update"),
        ("jit(train_step)/grad_norm/reduce_sum", "gradient norm"),
        ("jit(train_step)/jvp()/jit(_threefry_fold_in)/train_step/add", "dropout bits (RNG)"),
        ("jit(train_step)/jvp(attention)/jit(_threefry_split)/shift", "dropout bits (RNG)"),
        ("jit(train_step)/transpose(jvp(mlm_head))/bph,vh->bpv/dot_general", "MLM head and loss"),
        ("jit(train_step)/jvp(mlm_loss)/jit(log_softmax)/exp", "MLM head and loss"),
        ("jit(train_step)/transpose(jvp(nsp_head))/dot_general", "NSP head and loss"),
        ("jit(train_step)/transpose(jvp(attention))/bqhd,bkhd->bhqk/dot", "attention"),
        ("jit(train_step)/while/body/jvp(ffn)/gelu", "feed-forward"),
        ("jit(train_step)/jvp(norm_residual)/add", "layer norms and residuals"),
        ("state['params']['bert']['embeddings']['word_embeddings']", "parameter casts and copies"),
        ("jit(train_step)/attention_mask_not_a_scope/add", "other"),
        ("", "other"),
    ],
)
def test_named_scopes_pick_the_group(op_name, group):
    ins = hlo.Instruction("x", "f32[4]", "add", [], f'metadata={{op_name="{op_name}"}}')
    assert hbm.group_of(ins) == group


SCANNED = """HloModule step, entry_computation_layout={()->()}

%fused_slice (param_0: f32[12,64,256], param_1: s32[]) -> f32[64,256] {
  %param_0 = f32[12,64,256]{2,1,0} parameter(0)
  %param_1 = s32[] parameter(1)
  %zero = s32[] constant(0)
  %inner = f32[1,64,256]{2,1,0} fusion(%param_0, %param_1), kind=kLoop, calls=%fused_inner
  ROOT %b = f32[64,256]{1,0} bitcast(%inner)
}

%fused_inner (param_0.1: f32[12,64,256], param_1.1: s32[]) -> f32[1,64,256] {
  %param_0.1 = f32[12,64,256]{2,1,0} parameter(0)
  %param_1.1 = s32[] parameter(1)
  %zero.1 = s32[] constant(0)
  ROOT %ds = f32[1,64,256]{2,1,0} dynamic-slice(%param_0.1, %param_1.1, %zero.1, %zero.1), dynamic_slice_sizes={1,64,256}
}

ENTRY %main () -> f32[64,256] {
  %buffer = f32[12,64,256]{2,1,0} custom-call(), custom_call_target="AllocateBuffer"
  %i = s32[] constant(3)
  ROOT %one = f32[64,256]{1,0} fusion(%buffer, %i), kind=kLoop, calls=%fused_slice, metadata={op_name="jit(step)/transpose(jvp())/while/body/dynamic_slice"}
}
"""


def test_a_scanned_layers_stacked_buffer_counts_the_layer_read_not_the_stack():
    """A scan's saved activations: the buffer's allocation moves nothing, and a fusion that
    slices one layer out of the stacked buffer inside a nested fusion reads that layer only."""
    a = hbm.attribute(SCANNED)
    layer = 64 * 256 * 4
    # the layer read, the layer written, and the s32 index (4 bytes)
    assert a.total_bytes == 2 * layer + 4
    assert a.groups == {"scanned layers: saved activations": 2 * layer + 4}


# Two splash kernels as the TPU compiler writes them (shapes cut down): a Mosaic call's
# frontend_attributes hold JSON over three lines, and so does every instruction that reads its
# result. The first takes the query positions too (a sliding window's LocalMask is computed in
# the kernel); the second, a global layer's, only the segment ids.
MOSAIC = """HloModule step, entry_computation_layout={()->()}

ENTRY %main (q: bf16[2,2,512,64], seg: s32[2,512,128], kvseg: s32[2,8,512]) -> f32[2,512,64] {
  %q = bf16[2,2,512,64]{3,2,1,0} parameter(0)
  %seg = s32[2,512,128]{2,1,0} parameter(1)
  %kvseg = s32[2,8,512]{2,1,0} parameter(2)
  %iota.1 = s32[512,128]{1,0} iota(), iota_dimension=0
  %splash_mha_fwd_segmented_residuals.6 = (f32[2,512,64]{2,1,0}, bf16[2,2,512,64]{3,2,1,0}) custom-call(%q, %q, %q, %seg, %kvseg, /*index=5*/%iota.1), custom_call_target="tpu_custom_call", frontend_attributes={kernel_metadata={
"xprof_metadata":"{\\"block_q\\": 512, \\"mask\\": \\"(local)\\"}"
}}, metadata={op_name="jit(step)/attention/shard_map/pallas_call"}
  %gte.1 = bf16[2,2,512,64]{3,2,1,0} get-tuple-element(%splash_mha_fwd_segmented_residuals.6), index=1, frontend_attributes={kernel_metadata={
"xprof_metadata":"{\\"block_q\\": 512}"
}}, metadata={op_name="jit(step)/attention/shard_map/pallas_call"}
  %splash_mha_fwd_segmented_residuals.4 = (f32[2,512,64]{2,1,0}, bf16[2,2,512,64]{3,2,1,0}) custom-call(%gte.1, %q, %q, %seg, %kvseg), custom_call_target="tpu_custom_call", frontend_attributes={kernel_metadata={
"xprof_metadata":"{\\"block_q\\": 512}"
}}, metadata={op_name="jit(step)/attention/shard_map/pallas_call"}
  ROOT %out = f32[2,512,64]{2,1,0} get-tuple-element(%splash_mha_fwd_segmented_residuals.4), index=0
}
"""


def test_instructions_written_over_several_lines_are_read_whole():
    """A Mosaic kernel's attributes span lines, one starting with "}}": the computation goes on
    after it (it used to end there, and the rest of the step's bytes went uncounted)."""
    module = hlo.parse_module(MOSAIC)
    names = [i.name for i in module["main"].instructions]
    assert names == [
        "q",
        "seg",
        "kvseg",
        "iota.1",
        "splash_mha_fwd_segmented_residuals.6",
        "gte.1",
        "splash_mha_fwd_segmented_residuals.4",
        "out",
    ]
    second = module["main"].instructions[6]
    assert second.operands == ["gte.1", "q", "q", "seg", "kvseg"]
    assert 'op_name="jit(step)/attention' in second.attrs
    # A bracket inside a quoted string neither opens nor closes an instruction.
    assert hlo._unclosed('%a = f32[] custom-call(), backend_config="(" {') is True
    assert hlo._unclosed('%a = f32[] custom-call(), backend_config="((" ') is False


def test_splash_kernels_tell_local_window_calls_from_global_ones():
    assert figures.splash_kernels(MOSAIC) == {"global": 1, "local": 1}
    assert figures.splash_kernels(MODULE) == {"global": 0, "local": 0}
