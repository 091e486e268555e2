// server/http's queue codecs: the reserved-key and value rules of the
// PAI-EAS queue API (queue_params.h), the WebSocket handshake key and a
// session's handling of pings, data and oversized frames (websocket.h),
// and protobuf replies the SDKs decode (queue_codec.h, checked by decoding
// them again with the generated code).
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>

extern "C" {
#include "queue_codec.h"
#include "queue_params.h"
#include "queueservice.pb-c.h"
#include "websocket.h"
}
#include "osp_test.h"

namespace {

uint64_t Timeout(const char *text) {
    uint64_t ns = 12345;
    osp_error *err = queue_parse_timeout(text, &ns);
    EXPECT_EQ(err, nullptr) << text;
    osp_error_free(err);
    return ns;
}

bool TimeoutFails(const char *text) {
    uint64_t ns;
    osp_error *err = queue_parse_timeout(text, &ns);
    bool failed = err != nullptr;
    osp_error_free(err);
    return failed;
}

TEST(QueueParams, GoDurationsAndBareSeconds) {
    EXPECT_EQ(Timeout("0"), 0u);
    EXPECT_EQ(Timeout("0s"), 0u);
    EXPECT_EQ(Timeout("5s"), 5000000000ull);
    EXPECT_EQ(Timeout("5"), 5000000000ull);
    EXPECT_EQ(Timeout("0.5"), 500000000ull);
    EXPECT_EQ(Timeout("500ms"), 500000000ull);
    EXPECT_EQ(Timeout("1m30s"), 90000000000ull);
    EXPECT_EQ(Timeout("0.5h"), 1800000000000ull);
    EXPECT_EQ(Timeout("250us"), 250000ull);
    EXPECT_EQ(Timeout("-1s"), 0u);
    EXPECT_TRUE(TimeoutFails(""));
    EXPECT_TRUE(TimeoutFails("s"));
    EXPECT_TRUE(TimeoutFails("5x"));
    EXPECT_TRUE(TimeoutFails("1s5"));
    EXPECT_TRUE(TimeoutFails("2h")); // over an hour
    EXPECT_TRUE(TimeoutFails("99999999999999999999s"));
}

TEST(QueueParams, ReservedKeys) {
    EXPECT_TRUE(queue_key_is_reserved("_index_"));
    EXPECT_TRUE(queue_key_is_reserved("_nope_"));
    EXPECT_FALSE(queue_key_is_reserved("requestId"));
    EXPECT_FALSE(queue_key_is_reserved("_"));
    EXPECT_TRUE(queue_key_is_known("_auto_delete_"));
    EXPECT_TRUE(queue_key_is_known("_negative_"));
    EXPECT_FALSE(queue_key_is_known("_nope_"));
}

TEST(QueueParams, Indexes) {
    uint64_t *list = nullptr;
    size_t n = 0;
    ASSERT_EQ(queue_parse_indexes("1, 2,30", &list, &n), nullptr);
    ASSERT_EQ(n, 3u);
    EXPECT_EQ(list[2], 30u);
    free(list);
    for (const char *bad :
         {"", "0", "1,,2", "x", "-1", "1,", "18446744073709551616"}) {
        osp_error *err = queue_parse_indexes(bad, &list, &n);
        EXPECT_NE(err, nullptr) << bad;
        osp_error_free(err);
    }
}

TEST(QueueParams, NegativeCodes) {
    for (const char *ok : {"Shutdown", "Timeout", "InternalError", "404",
                           "Model.Failed", "Abc-Def"})
        EXPECT_TRUE(queue_negative_code_valid(ok)) << ok;
    for (const char *bad : {"", "shutdown", "A1", "Abc.def", "A.B.C",
                            "VeryLongCodeNameThatIsOver", "12a"})
        EXPECT_FALSE(queue_negative_code_valid(bad)) << bad;
    char *code = nullptr, *reason = nullptr;
    const char form[] = "_code_=Shutdown&_reason_=going+away%21";
    ASSERT_EQ(queue_parse_negative_form(form, strlen(form), &code, &reason),
              nullptr);
    EXPECT_STREQ(code, "Shutdown");
    EXPECT_STREQ(reason, "going away!");
    free(code);
    free(reason);
    const char bad[] = "_reason_=x";
    osp_error *err =
        queue_parse_negative_form(bad, strlen(bad), &code, &reason);
    EXPECT_NE(err, nullptr);
    osp_error_free(err);
}

TEST(WebSocket, AcceptKeyOfRfc6455Example) {
    char out[WS_ACCEPT_KEY_SIZE];
    ASSERT_TRUE(ws_accept_key("dGhlIHNhbXBsZSBub25jZQ==", out));
    EXPECT_STREQ(out, "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=");
    EXPECT_FALSE(ws_accept_key("short", out));
    EXPECT_FALSE(ws_accept_key(nullptr, out));
    EXPECT_FALSE(ws_accept_key("dGhlIHNhbXBsZSBub25jZQ!!", out));
}

struct Peer {
    std::string out;
    int pings = 0;
};

bool PeerSend(void *ctx, const void *data, size_t len) {
    static_cast<Peer *>(ctx)->out.append(static_cast<const char *>(data), len);
    return true;
}

void PeerPing(void *ctx) {
    static_cast<Peer *>(ctx)->pings++;
}

const ws_session_callbacks kPeer = {PeerSend, PeerPing};

// A masked client frame (mask 0x01020304).
std::string ClientFrame(unsigned opcode, const std::string &payload) {
    std::string f;
    f += static_cast<char>(0x80 | opcode);
    const unsigned char mask[4] = {1, 2, 3, 4};
    if (payload.size() < 126) {
        f += static_cast<char>(0x80 | payload.size());
    } else {
        f += static_cast<char>(0x80 | 126);
        f += static_cast<char>(payload.size() >> 8);
        f += static_cast<char>(payload.size() & 0xff);
    }
    f.append(reinterpret_cast<const char *>(mask), 4);
    for (size_t i = 0; i < payload.size(); i++)
        f += static_cast<char>(payload[i] ^ mask[i % 4]);
    return f;
}

TEST(WebSocket, PongForEveryPingDataIgnored) {
    Peer peer;
    ws_session *s = nullptr;
    ASSERT_EQ(ws_session_new(&kPeer, &peer, 1024, &s), nullptr);
    std::string in = ClientFrame(0x9, "ping") + ClientFrame(0x2, "data") +
                     ClientFrame(0x1, "text") + ClientFrame(0x9, "");
    // byte by byte: frames split anywhere
    for (char c : in)
        ASSERT_TRUE(ws_session_feed(s, &c, 1));
    EXPECT_EQ(peer.pings, 2);
    std::string pongs =
        std::string("\x8a\x04ping", 6) + std::string("\x8a\x00", 2);
    EXPECT_EQ(peer.out, pongs);
    peer.out.clear();
    ASSERT_TRUE(ws_session_send_binary(s, "\x08\x01", 2));
    EXPECT_EQ(peer.out, std::string("\x82\x02\x08\x01", 4));
    ws_session_free(s);
}

TEST(WebSocket, OversizedMessageAndCloseEndTheSession) {
    Peer peer;
    ws_session *s = nullptr;
    ASSERT_EQ(ws_session_new(&kPeer, &peer, 100, &s), nullptr);
    std::string big = ClientFrame(0x2, std::string(200, 'x'));
    EXPECT_FALSE(ws_session_feed(s, big.data(), big.size()));
    ASSERT_GE(peer.out.size(), 4u);
    EXPECT_EQ(static_cast<unsigned char>(peer.out[0]), 0x88u); // close
    EXPECT_EQ(static_cast<unsigned char>(peer.out[2]) << 8 |
                  static_cast<unsigned char>(peer.out[3]),
              1009);
    EXPECT_FALSE(ws_session_send_binary(s, "x", 1));
    ws_session_free(s);

    peer.out.clear();
    ASSERT_EQ(ws_session_new(&kPeer, &peer, 100, &s), nullptr);
    std::string close = ClientFrame(0x8, std::string("\x03\xe8", 2));
    EXPECT_FALSE(ws_session_feed(s, close.data(), close.size()));
    EXPECT_EQ(static_cast<unsigned char>(peer.out[0]), 0x88u);
    ws_session_free(s);

    peer.out.clear();
    ASSERT_EQ(ws_session_new(&kPeer, &peer, 100, &s), nullptr);
    std::string unmasked("\x82\x01x", 3); // clients must mask
    EXPECT_FALSE(ws_session_feed(s, unmasked.data(), unmasked.size()));
    ws_session_free(s);
}

TEST(QueueCodec, FrameMatchesThePythonRuntimesBytes) {
    osp_queue_tag tag = {"requestId", "r1"};
    osp_queue_item item = {};
    item.index = 1;
    item.request_id = "r1";
    item.tags = &tag;
    item.n_tags = 1;
    item.data = "abc";
    item.size = 3;
    uint8_t *out = nullptr;
    size_t len = 0;
    ASSERT_EQ(queue_encode_frame(&item, false, &out, &len), nullptr);
    const unsigned char want[] = {0x08, 0x01, 0x12, 0x0f, 0x0a, 0x09, 'r', 'e',
                                  'q',  'u',  'e',  's',  't',  'I',  'd', 0x12,
                                  0x02, 'r',  '1',  0x1a, 0x03, 'a',  'b', 'c'};
    ASSERT_EQ(len, sizeof want);
    EXPECT_EQ(memcmp(out, want, len), 0);
    free(out);
    ASSERT_EQ(queue_encode_frame(&item, true, &out, &len), nullptr);
    EXPECT_EQ(len, sizeof want - 5); // no data
    free(out);
}

TEST(QueueCodec, ListAndAttributesDecode) {
    osp_queue_tag tags[2] = {{"requestId", "a"}, {"foo", "bar"}};
    osp_queue_item one = {}, two = {};
    one.index = 7;
    one.tags = tags;
    one.n_tags = 2;
    one.data = "x";
    one.size = 1;
    two.index = 9;
    two.tags = tags;
    two.n_tags = 1;
    osp_queue_item *items[2] = {&one, &two};
    uint8_t *out = nullptr;
    size_t len = 0;
    ASSERT_EQ(queue_encode_list_proto(items, 2, &out, &len), nullptr);
    Streaming__DataFrameListProto *list =
        streaming__data_frame_list_proto__unpack(nullptr, len, out);
    ASSERT_NE(list, nullptr);
    ASSERT_EQ(list->n_index, 2u);
    EXPECT_EQ(list->index[0]->index, 7u);
    EXPECT_EQ(list->index[0]->n_tags, 2u);
    EXPECT_STREQ(list->index[0]->tags[1]->value, "bar");
    EXPECT_EQ(list->index[1]->data.len, 0u);
    streaming__data_frame_list_proto__free_unpacked(list, nullptr);
    free(out);
    ASSERT_EQ(queue_encode_list_proto(items, 0, &out, &len), nullptr);
    EXPECT_EQ(len, 0u); // an empty body is an empty list

    char *json = nullptr;
    ASSERT_EQ(queue_encode_list_json(items, 1, &json, &len), nullptr);
    EXPECT_STREQ(json, "[{\"index\":7,\"tags\":{\"requestId\":\"a\",\"foo\":"
                       "\"bar\"},\"data\":\"eA==\",\"message\":\"\"}]");
    free(json);

    osp_queue_attribute attrs[1] = {
        {const_cast<char *>("stream.length"), const_cast<char *>("0")}};
    ASSERT_EQ(queue_encode_attributes_proto(attrs, 1, &out, &len), nullptr);
    const unsigned char want[] = {0x0a, 0x12, 0x0a, 0x0d, 's',  't', 'r',
                                  'e',  'a',  'm',  '.',  'l',  'e', 'n',
                                  'g',  't',  'h',  0x12, 0x01, '0'};
    ASSERT_EQ(len, sizeof want);
    EXPECT_EQ(memcmp(out, want, len), 0);
    free(out);
}

} // namespace
