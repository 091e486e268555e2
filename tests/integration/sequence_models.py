"""Repositories of stateful models for the sequence batcher tests, written
the way Triton's docs and qa/L0_sequence_batcher declare them, on the
built-in `accumulator` backend (OUTPUT = running sum of INPUT per
sequence, kept as implicit state; <control>_OUT echoes a control input)."""

import pathlib

import numpy as np

import harness


def accumulator_config(name, strategy="oldest {\n    max_candidate_sequences: 64\n"
                       "    preferred_batch_size: [ 4 ]\n"
                       "    max_queue_delay_microseconds: 2000\n  }",
                       max_batch_size=8, corrid="TYPE_UINT64",
                       idle_us=5000000, initial="zero_data: true", dtype="TYPE_INT32",
                       instances=1, extra="", batch_facts=False):
    outputs = [("OUTPUT", dtype, [1]), ("START_OUT", "TYPE_INT32", [1]),
               ("END_OUT", "TYPE_FP32", [1]), ("READY_OUT", "TYPE_BOOL", [1])]
    if batch_facts:  # the accumulator's view of its batch (accumulator.c)
        outputs += [(n, "TYPE_INT32", [1]) for n in BATCH_FACTS]
    controls = (
        '    { name: "START" control [ { kind: CONTROL_SEQUENCE_START\n'
        "        int32_false_true: [ 0, 1 ] } ] },\n"
        '    { name: "END" control [ { kind: CONTROL_SEQUENCE_END\n'
        "        fp32_false_true: [ 0, 1 ] } ] },\n"
        '    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY\n'
        "        bool_false_true: [ false, true ] } ] }")
    if corrid:
        outputs.append(("CORRID_OUT", corrid, [1]))
        controls += (
            ',\n    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID\n'
            f"        data_type: {corrid} }} ] }}")
    seq = (sequence_block(strategy, controls, dtype, initial=initial, idle_us=idle_us)
           + f"instance_group [ {{ count: {instances} kind: KIND_CPU }} ]\n")
    return harness.model_config(name, "accumulator", [("INPUT", dtype, [1])],
                                outputs, max_batch_size, seq + extra)


DIRECT = "direct { max_queue_delay_microseconds: 0 }"
BATCH_FACTS = ["BATCH_INDEX", "BATCH_SIZE", "INSTANCE", "NOT_READY_ROWS"]


def write_slot_repo(path):
    """Models whose batch slots the tests watch (test_sequence_slots.py)."""
    path = pathlib.Path(path)
    path.mkdir(parents=True, exist_ok=True)
    # 2 instances x 2 slots, batches run at once
    harness.write_model(path, "slots_direct",
                        accumulator_config("slots_direct", DIRECT, max_batch_size=2,
                                           instances=2, batch_facts=True))
    # a single batch slot: later sequences wait in the backlog
    harness.write_model(path, "slots_one",
                        accumulator_config("slots_one", DIRECT, max_batch_size=1,
                                           batch_facts=True, idle_us=300000))
    # a batch waits (30 s) until half of its 4 slots have a request
    harness.write_model(path, "slots_util", accumulator_config(
        "slots_util", "direct { max_queue_delay_microseconds: 30000000\n"
        "    minimum_slot_utilization: 0.5 }", max_batch_size=4, batch_facts=True))
    # a lone request runs once the 100 ms delay has passed
    harness.write_model(path, "slots_delay", accumulator_config(
        "slots_delay", "direct { max_queue_delay_microseconds: 100000\n"
        "    minimum_slot_utilization: 0.9 }", max_batch_size=4, batch_facts=True))
    # oldest with one candidate sequence per instance
    harness.write_model(path, "slots_oldest", accumulator_config(
        "slots_oldest", "oldest { max_candidate_sequences: 1\n"
        "    max_queue_delay_microseconds: 0 }", max_batch_size=4, batch_facts=True))
    return path


def write_repo(path):
    path = pathlib.Path(path)
    path.mkdir(parents=True, exist_ok=True)
    # two instances: each sequence stays on the one holding its batch slot
    harness.write_model(path, "seq_oldest", accumulator_config("seq_oldest", instances=2))
    harness.write_model(path, "seq_direct",
                        accumulator_config("seq_direct", DIRECT, corrid="TYPE_STRING"))
    harness.write_model(path, "seq_nobatch",
                        accumulator_config("seq_nobatch", DIRECT, max_batch_size=0,
                                           corrid="TYPE_INT64", dtype="TYPE_FP32"))
    # the table bound: sequences that stay open for the test's length
    harness.write_model(path, "seq_bounded",
                        accumulator_config("seq_bounded",
                                           "oldest { max_candidate_sequences: 4096 }",
                                           max_batch_size=0, corrid=None,
                                           idle_us=600000000))
    harness.write_model(path, "seq_idle",
                        accumulator_config("seq_idle", DIRECT, idle_us=200000))
    # initial_state from a file: the sum starts at 100
    mdir = harness.write_model(
        path, "seq_file",
        accumulator_config("seq_file", DIRECT, initial='data_file: "hundred"'))
    (mdir / "1" / "initial_state").mkdir()
    (mdir / "1" / "initial_state" / "hundred").write_bytes((100).to_bytes(4, "little"))
    return path


# ---- ONNX and python sequence models --------------------------------------
# The same stateful contract on the backends users write sequence models in:
# an ONNX graph whose inputs include the control and state tensors (as
# Triton's qa/common/gen_qa_implicit_models.py builds them), and a python
# model that reads them with pb_utils.get_input_tensor_by_name and returns
# the next state as a response tensor.

CONTROLS = (
    '    { name: "START" control [ { kind: CONTROL_SEQUENCE_START\n'
    "        int32_false_true: [ 0, 1 ] } ] },\n"
    '    { name: "END" control [ { kind: CONTROL_SEQUENCE_END\n'
    "        fp32_false_true: [ 0, 1 ] } ] },\n"
    '    { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY\n'
    "        bool_false_true: [ false, true ] } ] },\n"
    '    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID\n'
    "        data_type: TYPE_UINT64 } ] }")
ECHOES = [("START_OUT", "TYPE_INT32", [1]), ("END_OUT", "TYPE_FP32", [1]),
          ("READY_OUT", "TYPE_BOOL", [1]), ("CORRID_OUT", "TYPE_UINT64", [1])]


def sequence_block(strategy=DIRECT, controls=CONTROLS, dtype="TYPE_INT32", dims=(1,),
                   initial="zero_data: true", idle_us=5000000):
    dims_text = harness._dims(list(dims))
    return (
        "sequence_batching {\n"
        f"  max_sequence_idle_microseconds: {idle_us}\n"
        f"  {strategy}\n"
        f"  control_input [\n{controls}\n  ]\n"
        "  state [ {\n"
        '    input_name: "INPUT_STATE"\n'
        '    output_name: "OUTPUT_STATE"\n'
        f"    data_type: {dtype}\n"
        f"    dims: {dims_text}\n"
        f"    initial_state {{ data_type: {dtype} dims: {dims_text}\n"
        f'      {initial} name: "initial" }}\n'
        "  } ]\n"
        "}\n")


def onnx_accumulator(batching=True):
    """INPUT, START (int32), END (fp32), READY (bool), CORRID (uint64) and
    INPUT_STATE in; OUTPUT = INPUT + INPUT_STATE * (1 - START) * READY,
    OUTPUT_STATE = OUTPUT, and each control echoed as <control>_OUT. The
    graph ignores the state on START itself, as Triton's implicit-state
    test models do: with a non-zero initial state, a START step shows that
    START reached the graph."""
    import onnx
    from onnx import TensorProto, helper
    b = ["batch"] if batching else []
    i32, f32 = TensorProto.INT32, TensorProto.FLOAT
    vi = helper.make_tensor_value_info
    inputs = [vi("INPUT", i32, b + [1]), vi("START", i32, b + [1]),
              vi("END", f32, b + [1]), vi("READY", TensorProto.BOOL, b + [1]),
              vi("CORRID", TensorProto.UINT64, b + [1]),
              vi("INPUT_STATE", i32, b + [1])]
    outputs = [vi("OUTPUT", i32, b + [1]), vi("OUTPUT_STATE", i32, b + [1]),
               vi("START_OUT", i32, b + [1]), vi("END_OUT", f32, b + [1]),
               vi("READY_OUT", TensorProto.BOOL, b + [1]),
               vi("CORRID_OUT", TensorProto.UINT64, b + [1])]
    one = helper.make_tensor("one", i32, [1], [1])
    nodes = [
        helper.make_node("Sub", ["one", "START"], ["not_start"]),
        helper.make_node("Cast", ["READY"], ["ready_i"], to=i32),
        helper.make_node("Mul", ["not_start", "ready_i"], ["keep"]),
        helper.make_node("Mul", ["INPUT_STATE", "keep"], ["kept"]),
        helper.make_node("Add", ["INPUT", "kept"], ["OUTPUT"]),
        helper.make_node("Identity", ["OUTPUT"], ["OUTPUT_STATE"]),
        helper.make_node("Identity", ["START"], ["START_OUT"]),
        helper.make_node("Identity", ["END"], ["END_OUT"]),
        helper.make_node("Identity", ["READY"], ["READY_OUT"]),
        helper.make_node("Identity", ["CORRID"], ["CORRID_OUT"]),
    ]
    graph = helper.make_graph(nodes, "seq", inputs, outputs, [one])
    model = helper.make_model(graph, producer_name="osprey-tests",
                              opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


def onnx_vector_accumulator():
    """Not batching: INPUT [2] FP32, START (bool) and INPUT_STATE [2] in;
    OUTPUT = START ? INPUT : INPUT + INPUT_STATE, OUTPUT_STATE = OUTPUT."""
    import onnx
    from onnx import TensorProto, helper
    f32 = TensorProto.FLOAT
    vi = helper.make_tensor_value_info
    nodes = [
        helper.make_node("Add", ["INPUT", "INPUT_STATE"], ["sum"]),
        helper.make_node("Where", ["START", "INPUT", "sum"], ["OUTPUT"]),
        helper.make_node("Identity", ["OUTPUT"], ["OUTPUT_STATE"]),
    ]
    graph = helper.make_graph(
        nodes, "seq_vec",
        [vi("INPUT", f32, [2]), vi("START", TensorProto.BOOL, [1]),
         vi("INPUT_STATE", f32, [2])],
        [vi("OUTPUT", f32, [2]), vi("OUTPUT_STATE", f32, [2])])
    model = helper.make_model(graph, producer_name="osprey-tests",
                              opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


PYTHON_ACCUMULATOR = '''
import json

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """OUTPUT = INPUT + INPUT_STATE (the core resets the state on START),
    returned also as OUTPUT_STATE, the next state; each control echoed as
    <control>_OUT. INPUT -1 returns a state of the wrong shape."""

    def initialize(self, args):
        config = json.loads(args["model_config"])
        self.states = [s["output_name"] for s in config["sequence_batching"]["state"]]

    def execute(self, requests):
        responses = []
        for request in requests:
            get = lambda name: pb_utils.get_input_tensor_by_name(request, name).as_numpy()
            inp, state = get("INPUT"), get("INPUT_STATE")
            out = inp + state
            next_state = out if (inp != -1).all() else np.zeros((1, 2), np.int32)
            tensors = [pb_utils.Tensor("OUTPUT", out),
                       pb_utils.Tensor(self.states[0], next_state)]
            for name in ("START", "END", "READY", "CORRID"):
                tensors.append(pb_utils.Tensor(name + "_OUT", get(name)))
            responses.append(pb_utils.InferenceResponse(tensors))
        return responses
'''


def write_backend_repo(path, kind="KIND_CPU"):
    """ONNX and python sequence models, with and without batching; the
    batching ones on two instances of `kind`."""
    path = pathlib.Path(path)
    path.mkdir(parents=True, exist_ok=True)
    outputs = [("OUTPUT", "TYPE_INT32", [1])] + ECHOES
    oldest = ("oldest {\n    max_candidate_sequences: 64\n"
              "    preferred_batch_size: [ 4 ]\n"
              "    max_queue_delay_microseconds: 2000\n  }")
    instances = f'instance_group [ {{ count: 2 kind: {kind} }} ]\n'
    harness.write_model(
        path, "onnx_seq",
        harness.model_config("onnx_seq", "onnxruntime", [("INPUT", "TYPE_INT32", [1])],
                             outputs, 8, sequence_block(oldest) + instances),
        files={"model.onnx": onnx_accumulator()})
    # the initial state is 100: a START step that shows INPUT alone proves
    # the graph saw START (the state it got on START was 100)
    mdir = harness.write_model(
        path, "onnx_seq_file",
        harness.model_config("onnx_seq_file", "onnxruntime",
                             [("INPUT", "TYPE_INT32", [1])], outputs, 8,
                             sequence_block(initial='data_file: "hundred"')),
        files={"model.onnx": onnx_accumulator()})
    (mdir / "1" / "initial_state").mkdir()
    (mdir / "1" / "initial_state" / "hundred").write_bytes((100).to_bytes(4, "little"))
    bool_start = ('    { name: "START" control [ { kind: CONTROL_SEQUENCE_START\n'
                  "        bool_false_true: [ false, true ] } ] }")
    harness.write_model(
        path, "onnx_seq_nobatch",
        harness.model_config("onnx_seq_nobatch", "onnxruntime",
                             [("INPUT", "TYPE_FP32", [2])], [("OUTPUT", "TYPE_FP32", [2])], 0,
                             sequence_block(controls=bool_start, dtype="TYPE_FP32",
                                            dims=(2,))),
        files={"model.onnx": onnx_vector_accumulator()})
    # no inputs or outputs: auto-complete fills them from the graph, leaving
    # out the control and state tensors
    harness.write_model(
        path, "onnx_seq_auto",
        'name: "onnx_seq_auto"\nbackend: "onnxruntime"\nmax_batch_size: 8\n'
        + sequence_block(),
        files={"model.onnx": onnx_accumulator()})
    harness.write_model(
        path, "py_seq",
        harness.model_config("py_seq", "python", [("INPUT", "TYPE_INT32", [1])],
                             outputs, 8, sequence_block(oldest) + instances),
        files={"model.py": PYTHON_ACCUMULATOR.encode()})
    return path


def accumulator_input(client_module, value):
    """The accumulator's INPUT [1, 1] INT32 holding `value`, as an InferInput
    of client_module (tritonclient.http or tritonclient.grpc)."""
    inp = client_module.InferInput("INPUT", [1, 1], "INT32")
    inp.set_data_from_numpy(np.array([[value]], dtype=np.int32))
    return inp
