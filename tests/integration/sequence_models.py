"""Repositories of stateful models for the sequence batcher tests, written
the way Triton's docs and qa/L0_sequence_batcher declare them, on the
built-in `accumulator` backend (OUTPUT = running sum of INPUT per
sequence, kept as implicit state; <control>_OUT echoes a control input)."""

import pathlib

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
    seq = (
        "sequence_batching {\n"
        f"  max_sequence_idle_microseconds: {idle_us}\n"
        f"  {strategy}\n"
        f"  control_input [\n{controls}\n  ]\n"
        "  state [ {\n"
        '    input_name: "INPUT_STATE"\n'
        '    output_name: "OUTPUT_STATE"\n'
        f"    data_type: {dtype}\n"
        "    dims: [ 1 ]\n"
        f"    initial_state {{ data_type: {dtype} dims: [ 1 ]\n"
        f'      {initial} name: "initial" }}\n'
        "  } ]\n"
        "}\n"
        f"instance_group [ {{ count: {instances} kind: KIND_CPU }} ]\n")
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
