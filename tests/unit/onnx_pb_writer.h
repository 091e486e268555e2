// A protobuf writer for the ONNX tests (test_onnx_loader.cc,
// test_onnx_session_gpu.cc): just enough of the wire format to build
// ONNX's messages field by field, malformed ones included.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

class Pb {
  public:
    Pb &Varint(int field, uint64_t v) {
        Key(field, 0);
        Raw(v);
        return *this;
    }
    Pb &Bytes(int field, const std::string &s) {
        Key(field, 2);
        Raw(s.size());
        b_ += s;
        return *this;
    }
    Pb &Msg(int field, const Pb &m) {
        return Bytes(field, m.b_);
    }
    Pb &Fixed32(int field, uint32_t v) {
        Key(field, 5);
        for (int i = 0; i < 4; i++)
            b_ += static_cast<char>(v >> (8 * i));
        return *this;
    }
    Pb &Float(int field, float f) {
        uint32_t v;
        memcpy(&v, &f, 4);
        return Fixed32(field, v);
    }
    // Any bytes, as they are (for malformed input).
    Pb &Append(const std::string &s) {
        b_ += s;
        return *this;
    }
    const std::string &str() const {
        return b_;
    }

    void Key(int field, int wire_type) {
        Raw(static_cast<uint64_t>(field) << 3 | wire_type);
    }
    void Raw(uint64_t v) {
        while (v >= 0x80) {
            b_ += static_cast<char>(v | 0x80);
            v >>= 7;
        }
        b_ += static_cast<char>(v);
    }

  private:
    std::string b_;
};
