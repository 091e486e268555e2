// A protobuf writer for the ONNX tests (test_onnx_loader.cc,
// test_onnx_session_gpu.cc): just enough of the wire format to build
// ONNX's messages field by field, malformed ones included.
#pragma once

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

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

// ---- pieces of FP32 models (test_onnx_session_gpu.cc,
// test_onnx_batch_chunks.cc) ---------------------------------------------

// A ValueInfoProto of an FP32 tensor; a negative dim is the symbolic "N".
inline Pb OnnxFloatValue(const std::string &name,
                         const std::vector<int64_t> &dims) {
    Pb shape;
    for (int64_t d : dims) {
        Pb dim;
        if (d >= 0)
            dim.Varint(1, static_cast<uint64_t>(d));
        else
            dim.Bytes(2, "N");
        shape.Msg(1, dim);
    }
    Pb tensor_type;
    tensor_type.Varint(1, 1 /* FLOAT */).Msg(2, shape);
    Pb type;
    type.Msg(1, tensor_type);
    Pb v;
    v.Bytes(1, name).Msg(2, type);
    return v;
}

// A TensorProto initializer of FP32 values (raw_data).
inline Pb OnnxFloatInitializer(const std::string &name,
                               const std::vector<int64_t> &dims,
                               const std::vector<float> &values) {
    Pb t;
    for (int64_t d : dims)
        t.Varint(1, static_cast<uint64_t>(d));
    t.Varint(2, 1 /* FLOAT */).Bytes(8, name);
    t.Bytes(9, std::string(reinterpret_cast<const char *>(values.data()),
                           values.size() * sizeof(float)));
    return t;
}

// n floats uniform in [-1, 1), the same for the same seed.
inline std::vector<float> RandomFloats(size_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
    std::vector<float> v(n);
    for (float &f : v)
        f = dist(rng);
    return v;
}

// ---- models of several dtypes and ops with attributes
// (test_onnx_session_gpu.cc) ----------------------------------------------

// ONNX's TensorProto.DataType codes the tests use.
constexpr int kOnnxFloat = 1, kOnnxFloat16 = 10;

// A ValueInfoProto of a tensor of elem_type; a negative dim is "N".
inline Pb OnnxValue(const std::string &name, int elem_type,
                    const std::vector<int64_t> &dims) {
    Pb shape;
    for (int64_t d : dims) {
        Pb dim;
        if (d >= 0)
            dim.Varint(1, static_cast<uint64_t>(d));
        else
            dim.Bytes(2, "N");
        shape.Msg(1, dim);
    }
    Pb tensor_type;
    tensor_type.Varint(1, static_cast<uint64_t>(elem_type)).Msg(2, shape);
    Pb type;
    type.Msg(1, tensor_type);
    Pb v;
    v.Bytes(1, name).Msg(2, type);
    return v;
}

// A TensorProto initializer of elem_type whose raw_data is `raw`.
inline Pb OnnxRawInitializer(const std::string &name, int elem_type,
                             const std::vector<int64_t> &dims,
                             const std::string &raw) {
    Pb t;
    for (int64_t d : dims)
        t.Varint(1, static_cast<uint64_t>(d));
    t.Varint(2, static_cast<uint64_t>(elem_type)).Bytes(8, name).Bytes(9, raw);
    return t;
}

// An AttributeProto: an int, a list of ints, a float or a string.
inline Pb OnnxIntAttr(const std::string &name, int64_t v) {
    Pb a;
    a.Bytes(1, name).Varint(3, static_cast<uint64_t>(v)).Varint(20, 2);
    return a;
}
inline Pb OnnxIntsAttr(const std::string &name, const std::vector<int64_t> &v) {
    Pb a;
    a.Bytes(1, name);
    for (int64_t x : v)
        a.Varint(8, static_cast<uint64_t>(x));
    a.Varint(20, 7);
    return a;
}
inline Pb OnnxFloatAttr(const std::string &name, float v) {
    Pb a;
    a.Bytes(1, name).Float(2, v).Varint(20, 1);
    return a;
}
inline Pb OnnxStringAttr(const std::string &name, const std::string &v) {
    Pb a;
    a.Bytes(1, name).Bytes(4, v).Varint(20, 3);
    return a;
}

// A NodeProto of op_type over inputs to outputs, with attributes.
inline Pb OnnxNode(const std::string &op_type,
                   const std::vector<std::string> &inputs,
                   const std::vector<std::string> &outputs,
                   const std::vector<Pb> &attrs = {}) {
    Pb n;
    for (const std::string &i : inputs)
        n.Bytes(1, i);
    for (const std::string &o : outputs)
        n.Bytes(2, o);
    n.Bytes(4, op_type);
    for (const Pb &a : attrs)
        n.Msg(5, a);
    return n;
}
