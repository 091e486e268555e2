// config.pbtxt's sequence_batching and model_warmup, as the core parses
// them (server/core/config/model_config.c).
#include <gtest/gtest.h>

#include <string>

#include "osprey/model_config.h"

namespace {

struct Parsed {
    osp_model_config *cfg = nullptr;
    std::string error;
    explicit Parsed(const std::string &text) {
        osp_error *err =
            osp_model_config_parse(text.data(), text.size(), "c", &cfg);
        if (err) {
            error = osp_error_message(err);
            osp_error_free(err);
        }
    }
    ~Parsed() {
        osp_model_config_free(cfg);
    }
};

const std::string kHead =
    "max_batch_size: 8\n"
    "input { name: \"IN\" data_type: TYPE_INT32 dims: [ 1 ] }\n"
    "output { name: \"OUT\" data_type: TYPE_INT32 dims: [ 1 ] }\n";

TEST(SequenceConfig, ControlsStatesAndOldest) {
    Parsed p(kHead + R"(
sequence_batching {
  max_sequence_idle_microseconds: 5000000
  oldest { max_candidate_sequences: 4 max_queue_delay_microseconds: 100 }
  control_input [
    { name: "START" control [ { kind: CONTROL_SEQUENCE_START
                                fp32_false_true: [ 0, 1 ] } ] },
    { name: "FLAGS" control [
        { kind: CONTROL_SEQUENCE_READY bool_false_true: [ false, true ] },
        { kind: CONTROL_SEQUENCE_END int32_false_true: [ 5, 9 ] } ] },
    { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID
                                 data_type: TYPE_STRING } ] }
  ]
  state [ { input_name: "S_IN" output_name: "S_OUT" data_type: TYPE_FP32
            dims: [ 2, 3 ]
            initial_state { data_type: TYPE_FP32 dims: [ 2, 3 ]
                            data_file: "init.bin" name: "i" } } ]
})");
    ASSERT_EQ(p.error, "");
    const osp_sequence_batching &sb = p.cfg->sequence_batching;
    EXPECT_TRUE(sb.enabled);
    EXPECT_EQ(sb.strategy, OSP_SEQUENCE_OLDEST);
    EXPECT_EQ(sb.max_sequence_idle_us, 5000000u);
    EXPECT_EQ(sb.max_candidate_sequences, 4);
    EXPECT_EQ(sb.oldest_max_queue_delay_us, 100u);
    // Triton's normalisation: oldest prefers max_batch_size
    ASSERT_EQ(sb.n_preferred_batch_sizes, 1u);
    EXPECT_EQ(sb.preferred_batch_sizes[0], 8);
    ASSERT_EQ(sb.n_controls, 4u);
    EXPECT_EQ(sb.controls[0].dtype, OSP_TYPE_FP32);
    EXPECT_EQ(sb.controls[0].fp32_false_true[1], 1.0f);
    EXPECT_STREQ(sb.controls[2].name, "FLAGS");
    EXPECT_EQ(sb.controls[2].kind, OSP_SEQUENCE_CONTROL_END);
    EXPECT_EQ(sb.controls[2].int32_false_true[0], 5);
    EXPECT_EQ(sb.controls[3].dtype, OSP_TYPE_BYTES);
    ASSERT_EQ(sb.n_states, 1u);
    EXPECT_EQ(sb.states[0].dims.rank, 2);
    EXPECT_STREQ(sb.states[0].initial_data_file, "init.bin");
}

TEST(SequenceConfig, DefaultsAndErrors) {
    Parsed dflt(kHead + "sequence_batching { }");
    ASSERT_EQ(dflt.error, "");
    EXPECT_EQ(dflt.cfg->sequence_batching.strategy, OSP_SEQUENCE_DIRECT);
    EXPECT_EQ(dflt.cfg->sequence_batching.max_sequence_idle_us, 1000000u);

    EXPECT_NE(Parsed(kHead + "sequence_batching { } dynamic_batching { }")
                  .error.find("cannot be given together"),
              std::string::npos);
    EXPECT_NE(Parsed(kHead + "sequence_batching { control_input { name: \"S\" "
                             "control { kind: CONTROL_SEQUENCE_START "
                             "int32_false_true: [ 1 ] } } }")
                  .error.find("must have exactly 2 entries"),
              std::string::npos);
    EXPECT_NE(Parsed(kHead + "sequence_batching { control_input { name: \"C\" "
                             "control { kind: CONTROL_SEQUENCE_CORRID "
                             "data_type: TYPE_FP32 } } }")
                  .error.find("CONTROL_SEQUENCE_CORRID needs a data_type"),
              std::string::npos);
    EXPECT_NE(Parsed(kHead + "sequence_batching { state { input_name: \"a\" "
                             "output_name: \"b\" data_type: TYPE_FP32 "
                             "dims: [ -1 ] } }")
                  .error.find("must have fixed dims"),
              std::string::npos);
    EXPECT_NE(Parsed(kHead + "sequence_batching { state { input_name: \"a\" "
                             "output_name: \"b\" data_type: TYPE_FP32 "
                             "dims: [ 1 ] initial_state { data_file: "
                             "\"../x\" } } }")
                  .error.find("must be a file name"),
              std::string::npos);
    EXPECT_NE(Parsed(kHead + "sequence_batching { direct { } oldest { } }")
                  .error.find("only one of direct and oldest"),
              std::string::npos);
}

TEST(SequenceConfig, ModelWarmup) {
    Parsed p(kHead + R"(
model_warmup [
  { name: "zeros" batch_size: 4 count: 3
    inputs { key: "IN" value { data_type: TYPE_INT32 dims: [ 1 ]
                               zero_data: true } } },
  { name: "file"
    inputs { key: "IN" value { data_type: TYPE_INT32 dims: [ 1 ]
                               input_data_file: "in.bin" } } }
])");
    ASSERT_EQ(p.error, "");
    ASSERT_EQ(p.cfg->n_warmups, 2u);
    EXPECT_STREQ(p.cfg->warmups[0].name, "zeros");
    EXPECT_EQ(p.cfg->warmups[0].batch_size, 4u);
    EXPECT_EQ(p.cfg->warmups[0].count, 3u);
    EXPECT_EQ(p.cfg->warmups[0].inputs[0].data, OSP_WARMUP_ZERO_DATA);
    EXPECT_EQ(p.cfg->warmups[1].inputs[0].data, OSP_WARMUP_INPUT_DATA_FILE);
    EXPECT_STREQ(p.cfg->warmups[1].inputs[0].input_data_file, "in.bin");

    EXPECT_NE(Parsed(kHead + "model_warmup { name: \"w\" inputs { key: \"IN\" "
                             "value { data_type: TYPE_INT32 dims: [ 1 ] "
                             "zero_data: true random_data: true } } }")
                  .error.find("may have only one of zero_data"),
              std::string::npos);
}

} // namespace
