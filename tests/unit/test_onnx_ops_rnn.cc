// backends/onnx/onnx_ops_rnn.c: RNN, GRU and LSTM built on hand-made
// nodes, inferred on host descs and run on the CPU device, every output
// checked against a plain loop-by-loop reference in double precision
// written here from the ONNX operator definitions, over directions,
// layouts, initial states, sequence lengths, peepholes, clip and
// activations.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <random>
#include <string>
#include <strings.h>
#include <vector>

#include "onnx_op_harness.h"

extern "C" const onnx_op_family onnx_ops_rnn_family;

namespace {

using namespace onnx_test;

// ---- harness (onnx_op_harness.h) -------------------------------------------

// Uniform values in [-scale, scale) from a fixed seed.
std::vector<float> RandVec(int64_t n, unsigned seed, float scale) {
    std::mt19937 gen(seed);
    std::uniform_real_distribution<float> dist(-scale, scale);
    std::vector<float> v((size_t)n);
    for (float &f : v)
        f = dist(gen);
    return v;
}

const onnx_op *Find(const char *op_type, int64_t opset) {
    return FindOp(onnx_ops_rnn_family, "", op_type, opset);
}

// RunCall of op_type at opset on `ins` (nullptr for an omitted input) with
// `present` outputs.
osp_error *RunOp(const char *op_type, int64_t opset, const Attrs &attrs,
                 const std::vector<const Tensor *> &ins,
                 const std::vector<bool> &present, OpResult *run) {
    return RunCall(onnx_ops_rnn_family,
                   Call(op_type, opset, "", present.size(), present), attrs,
                   ins, run);
}

// ---- the case and its reference ---------------------------------------------

struct Spec {
    std::string op = "LSTM"; // RNN, GRU, LSTM
    int64_t opset = 14;
    int64_t seq = 5, batch = 3, input = 4, hidden = 6;
    std::string direction = "forward";
    int layout = 0;
    bool bias = true;
    bool h0 = false, c0 = false, peepholes = false;
    std::vector<int32_t> lens; // empty: no sequence_lens input
    bool lens_known = true;
    bool lbr = false;          // GRU linear_before_reset
    bool input_forget = false; // LSTM
    float clip = 0.0f;         // 0: no clip attribute
    std::vector<std::string> acts;
    std::vector<float> alphas, betas;
    bool hidden_attr = true;
    std::vector<bool> outputs; // empty: all of the op's
    unsigned seed = 1;
};

int Gates(const Spec &s) {
    return s.op == "RNN" ? 1 : s.op == "GRU" ? 3 : 4;
}
int NumDirs(const Spec &s) {
    return s.direction == "bidirectional" ? 2 : 1;
}
int NumActs(const Spec &s) {
    return s.op == "RNN" ? 1 : s.op == "GRU" ? 2 : 3;
}

struct Act {
    std::string name;
    double alpha = 0, beta = 0;
};

double Apply(const Act &a, double x) {
    const std::string &n = a.name;
    if (n == "relu")
        return x > 0 ? x : 0;
    if (n == "tanh")
        return std::tanh(x);
    if (n == "sigmoid")
        return 1.0 / (1.0 + std::exp(-x));
    if (n == "leakyrelu")
        return x < 0 ? a.alpha * x : x;
    if (n == "thresholdedrelu")
        return x > a.alpha ? x : 0;
    if (n == "hardsigmoid")
        return std::max(0.0, std::min(1.0, a.alpha * x + a.beta));
    if (n == "elu")
        return x < 0 ? a.alpha * (std::exp(x) - 1) : x;
    if (n == "softsign")
        return x / (1 + std::fabs(x));
    if (n == "softplus")
        return std::log1p(std::exp(x));
    if (n == "scaledtanh")
        return a.alpha * std::tanh(a.beta * x);
    if (n == "affine")
        return a.alpha * x + a.beta;
    ADD_FAILURE() << "no reference for activation " << n;
    return 0;
}

// The activations of each direction, alphas and betas consumed in order by
// those that take them (onnxruntime's reading).
std::vector<std::vector<Act>> RefActs(const Spec &s) {
    static const char *defaults[3][3] = {
        {"tanh"}, {"sigmoid", "tanh"}, {"sigmoid", "tanh", "tanh"}};
    int cell = s.op == "RNN" ? 0 : s.op == "GRU" ? 1 : 2;
    int na = NumActs(s), nd = NumDirs(s);
    std::vector<std::vector<Act>> out(nd, std::vector<Act>(na));
    size_t ia = 0, ib = 0;
    for (int d = 0; d < nd; d++)
        for (int j = 0; j < na; j++) {
            size_t idx = (size_t)(d * na + j);
            if (!s.acts.empty() && idx >= s.acts.size()) {
                out[d][j] = out[0][j];
                continue;
            }
            Act a;
            a.name = s.acts.empty() ? defaults[cell][j] : s.acts[idx];
            std::transform(a.name.begin(), a.name.end(), a.name.begin(),
                           [](unsigned char c) { return (char)tolower(c); });
            bool ua = false, ub = false;
            double da = 0, db = 0;
            if (a.name == "leakyrelu")
                ua = true, da = 0.01;
            else if (a.name == "thresholdedrelu" || a.name == "elu")
                ua = true, da = 1.0;
            else if (a.name == "hardsigmoid")
                ua = ub = true, da = 0.2, db = 0.5;
            else if (a.name == "scaledtanh")
                ua = ub = true, da = 1.0, db = 1.0;
            else if (a.name == "affine")
                ua = ub = true, da = 1.0, db = 0.0;
            a.alpha = da;
            a.beta = db;
            if (ua && ia < s.alphas.size())
                a.alpha = s.alphas[ia++];
            if (ub && ib < s.betas.size())
                a.beta = s.betas[ib++];
            out[d][j] = a;
        }
    return out;
}

struct Inputs {
    Tensor x, w, r, b, lens, h0, c0, p;
};

Inputs MakeInputs(const Spec &s) {
    Inputs in;
    int64_t G = Gates(s), nd = NumDirs(s), H = s.hidden;
    std::vector<int64_t> xd =
        s.layout == 0 ? std::vector<int64_t>{s.seq, s.batch, s.input}
                      : std::vector<int64_t>{s.batch, s.seq, s.input};
    std::vector<int64_t> hd = s.layout == 0
                                  ? std::vector<int64_t>{nd, s.batch, H}
                                  : std::vector<int64_t>{s.batch, nd, H};
    in.x = Make<float>(OSP_TYPE_FP32, xd, RandVec(CountOf(xd), s.seed, 1.0f));
    in.w = Make<float>(OSP_TYPE_FP32, {nd, G * H, s.input},
                       RandVec(nd * G * H * s.input, s.seed + 1, 0.5f));
    in.r = Make<float>(OSP_TYPE_FP32, {nd, G * H, H},
                       RandVec(nd * G * H * H, s.seed + 2, 0.5f));
    in.b = Make<float>(OSP_TYPE_FP32, {nd, 2 * G * H},
                       RandVec(nd * 2 * G * H, s.seed + 3, 0.5f));
    if (!s.lens.empty())
        in.lens =
            Make<int32_t>(OSP_TYPE_INT32, {s.batch}, s.lens, s.lens_known);
    in.h0 = Make<float>(OSP_TYPE_FP32, hd, RandVec(CountOf(hd), s.seed + 4, 1));
    in.c0 = Make<float>(OSP_TYPE_FP32, hd, RandVec(CountOf(hd), s.seed + 5, 1));
    in.p = Make<float>(OSP_TYPE_FP32, {nd, 3 * H},
                       RandVec(nd * 3 * H, s.seed + 6, 0.5f));
    return in;
}

struct RefOut {
    std::vector<double> y, yh, yc;
};

// The op by its definition: one batch entry, one time step at a time.
RefOut Reference(const Spec &s, const Inputs &in) {
    const int64_t G = Gates(s), nd = NumDirs(s), H = s.hidden, I = s.input,
                  seq = s.seq, batch = s.batch;
    std::vector<float> X = in.x.Floats(), W = in.w.Floats(), R = in.r.Floats(),
                       B = in.b.Floats(), H0 = in.h0.Floats(),
                       C0 = in.c0.Floats(), P = in.p.Floats();
    auto acts = RefActs(s);
    bool l0 = s.layout == 0;
    auto xat = [&](int64_t t, int64_t b, int64_t i) {
        return (double)X[(l0 ? t * batch + b : b * seq + t) * I + i];
    };
    auto sidx = [&](int64_t d, int64_t b, int64_t h) {
        return (l0 ? d * batch + b : b * nd + d) * H + h;
    };
    auto yidx = [&](int64_t t, int64_t d, int64_t b, int64_t h) {
        return l0 ? ((t * nd + d) * batch + b) * H + h
                  : ((b * seq + t) * nd + d) * H + h;
    };
    auto clip = [&](double v) {
        if (s.clip > 0)
            return std::max(-(double)s.clip, std::min((double)s.clip, v));
        return v;
    };
    RefOut out;
    out.y.assign((size_t)(seq * nd * batch * H), 0.0);
    out.yh.assign((size_t)(nd * batch * H), 0.0);
    out.yc.assign((size_t)(nd * batch * H), 0.0);
    for (int64_t d = 0; d < nd; d++) {
        bool reverse = s.direction == "reverse" || d == 1;
        const float *Wd = &W[d * G * H * I], *Rd = &R[d * G * H * H];
        const float *Wb = &B[d * 2 * G * H], *Rb = Wb + G * H;
        const float *Pd = &P[d * 3 * H];
        for (int64_t b = 0; b < batch; b++) {
            int64_t len = s.lens.empty() ? seq : s.lens[b];
            std::vector<double> h(H, 0.0), c(H, 0.0);
            for (int64_t j = 0; j < H; j++) {
                if (s.h0)
                    h[j] = H0[sidx(d, b, j)];
                if (s.c0)
                    c[j] = C0[sidx(d, b, j)];
            }
            for (int64_t step = 0; step < len; step++) {
                int64_t t = reverse ? len - 1 - step : step;
                // xw[g*H+j] = W x + Wb, rh[g*H+j] = R h + Rb
                std::vector<double> xw(G * H), rh(G * H);
                for (int64_t gj = 0; gj < G * H; gj++) {
                    double a = s.bias ? Wb[gj] : 0, r = s.bias ? Rb[gj] : 0;
                    for (int64_t i = 0; i < I; i++)
                        a += Wd[gj * I + i] * xat(t, b, i);
                    for (int64_t k = 0; k < H; k++)
                        r += Rd[gj * H + k] * h[k];
                    xw[gj] = a;
                    rh[gj] = r;
                }
                std::vector<double> hn(H);
                if (s.op == "RNN") {
                    for (int64_t j = 0; j < H; j++)
                        hn[j] = Apply(acts[d][0], clip(xw[j] + rh[j]));
                } else if (s.op == "GRU") {
                    std::vector<double> z(H), r(H);
                    for (int64_t j = 0; j < H; j++) {
                        z[j] = Apply(acts[d][0], clip(xw[j] + rh[j]));
                        r[j] = Apply(acts[d][0], clip(xw[H + j] + rh[H + j]));
                    }
                    for (int64_t j = 0; j < H; j++) {
                        double pre;
                        if (s.lbr) {
                            pre = xw[2 * H + j] + r[j] * rh[2 * H + j];
                        } else {
                            pre = xw[2 * H + j] + (s.bias ? Rb[2 * H + j] : 0);
                            for (int64_t k = 0; k < H; k++)
                                pre += Rd[(2 * H + j) * H + k] * r[k] * h[k];
                        }
                        double cand = Apply(acts[d][1], clip(pre));
                        hn[j] = (1 - z[j]) * cand + z[j] * h[j];
                    }
                } else {
                    std::vector<double> cn(H);
                    for (int64_t j = 0; j < H; j++) {
                        double pi = s.peepholes ? Pd[j] : 0,
                               po = s.peepholes ? Pd[H + j] : 0,
                               pf = s.peepholes ? Pd[2 * H + j] : 0;
                        double ig =
                            Apply(acts[d][0], clip(xw[j] + rh[j] + pi * c[j]));
                        double fg = s.input_forget
                                        ? 1 - ig
                                        : Apply(acts[d][0], clip(xw[2 * H + j] +
                                                                 rh[2 * H + j] +
                                                                 pf * c[j]));
                        double cg = Apply(acts[d][1],
                                          clip(xw[3 * H + j] + rh[3 * H + j]));
                        cn[j] = fg * c[j] + ig * cg;
                        double og =
                            Apply(acts[d][0],
                                  clip(xw[H + j] + rh[H + j] + po * cn[j]));
                        hn[j] = og * Apply(acts[d][2], cn[j]);
                    }
                    c = cn;
                }
                h = hn;
                for (int64_t j = 0; j < H; j++)
                    out.y[yidx(t, d, b, j)] = h[j];
            }
            for (int64_t j = 0; j < H; j++) {
                out.yh[sidx(d, b, j)] = h[j];
                out.yc[sidx(d, b, j)] = c[j];
            }
        }
    }
    return out;
}

Attrs MakeAttrs(const Spec &s) {
    Attrs a;
    if (s.hidden_attr)
        a.Int("hidden_size", s.hidden);
    if (s.direction != "forward")
        a.String("direction", s.direction);
    if (s.layout != 0)
        a.Int("layout", s.layout);
    if (s.lbr)
        a.Int("linear_before_reset", 1);
    if (s.input_forget)
        a.Int("input_forget", 1);
    if (s.clip > 0)
        a.Float("clip", s.clip);
    if (!s.acts.empty())
        a.Strings("activations", s.acts);
    if (!s.alphas.empty())
        a.Floats("activation_alpha", s.alphas);
    if (!s.betas.empty())
        a.Floats("activation_beta", s.betas);
    return a;
}

std::vector<const Tensor *> InputList(const Spec &s, const Inputs &in) {
    std::vector<const Tensor *> ins = {&in.x,
                                       &in.w,
                                       &in.r,
                                       s.bias ? &in.b : nullptr,
                                       s.lens.empty() ? nullptr : &in.lens,
                                       s.h0 ? &in.h0 : nullptr};
    if (s.op == "LSTM") {
        ins.push_back(s.c0 ? &in.c0 : nullptr);
        ins.push_back(s.peepholes ? &in.p : nullptr);
    }
    while (!ins.empty() && !ins.back())
        ins.pop_back();
    return ins;
}

std::string Describe(const Spec &s) {
    std::string d = s.op + " opset " + std::to_string(s.opset) + " " +
                    s.direction + " layout " + std::to_string(s.layout) +
                    " seq " + std::to_string(s.seq) + " batch " +
                    std::to_string(s.batch);
    if (s.h0)
        d += " +h0";
    if (s.c0)
        d += " +c0";
    if (!s.bias)
        d += " -B";
    if (s.peepholes)
        d += " +P";
    if (s.lbr)
        d += " lbr";
    if (s.input_forget)
        d += " input_forget";
    if (s.clip > 0)
        d += " clip";
    if (!s.lens.empty()) {
        d += " lens";
        for (int32_t l : s.lens)
            d += " " + std::to_string(l);
    }
    for (const std::string &a : s.acts)
        d += " " + a;
    return d;
}

void ExpectNear(const std::vector<double> &want, const Tensor &got,
                const std::string &what) {
    std::vector<float> g = got.Floats();
    ASSERT_EQ(want.size(), g.size()) << what;
    int bad = 0;
    for (size_t i = 0; i < want.size() && bad < 5; i++) {
        double tol = 1e-4 * std::max(1.0, std::fabs(want[i]));
        if (!(std::fabs(want[i] - g[i]) <= tol)) {
            ADD_FAILURE() << what << " at " << i << ": want " << want[i]
                          << ", got " << g[i];
            bad++;
        }
    }
}

// Runs the spec and compares every present output with the reference;
// returns the workspace the op asked for.
size_t Check(const Spec &s) {
    SCOPED_TRACE(Describe(s));
    Inputs in = MakeInputs(s);
    std::vector<bool> present = s.outputs;
    if (present.empty())
        present.assign(s.op == "LSTM" ? 3 : 2, true);
    OpResult run;
    osp_error *err = RunOp(s.op.c_str(), s.opset, MakeAttrs(s),
                           InputList(s, in), present, &run);
    if (err) {
        ADD_FAILURE() << TakeMessage(err);
        return 0;
    }
    RefOut want = Reference(s, in);
    int64_t nd = NumDirs(s);
    std::vector<int64_t> ydims =
        s.layout == 0 ? std::vector<int64_t>{s.seq, nd, s.batch, s.hidden}
                      : std::vector<int64_t>{s.batch, s.seq, nd, s.hidden};
    std::vector<int64_t> sdims =
        s.layout == 0 ? std::vector<int64_t>{nd, s.batch, s.hidden}
                      : std::vector<int64_t>{s.batch, nd, s.hidden};
    if (present[0]) {
        EXPECT_EQ(run.outs[0].Dims(), ydims);
        ExpectNear(want.y, run.outs[0], "Y");
    }
    if (present.size() > 1 && present[1]) {
        EXPECT_EQ(run.outs[1].Dims(), sdims);
        ExpectNear(want.yh, run.outs[1], "Y_h");
    }
    if (present.size() > 2 && present[2]) {
        EXPECT_EQ(run.outs[2].Dims(), sdims);
        ExpectNear(want.yc, run.outs[2], "Y_c");
    }
    return run.workspace;
}

osp_error_code FailCode(const Spec &s, std::string *msg = nullptr) {
    Inputs in = MakeInputs(s);
    OpResult run;
    std::vector<bool> present(s.op == "LSTM" ? 3 : 2, true);
    osp_error *err = RunOp(s.op.c_str(), s.opset, MakeAttrs(s),
                           InputList(s, in), present, &run);
    EXPECT_NE(err, nullptr) << Describe(s) << " was expected to fail";
    if (!err)
        return OSP_ERROR_UNKNOWN;
    osp_error_code code = osp_error_get_code(err);
    std::string m = TakeMessage(err);
    if (msg)
        *msg = m;
    return code;
}

// Each cell kind: RNN, GRU, GRU with linear_before_reset, LSTM.
std::vector<Spec> Cells() {
    Spec rnn, gru, gru_lbr, lstm;
    rnn.op = "RNN";
    gru.op = "GRU";
    gru_lbr.op = "GRU";
    gru_lbr.lbr = true;
    lstm.op = "LSTM";
    return {rnn, gru, gru_lbr, lstm};
}

const char *const kDirections[] = {"forward", "reverse", "bidirectional"};

// ---- tests
// -------------------------------------------------------------------

TEST(OnnxRnn, EveryCellDirectionLayoutAndInitialState) {
    for (Spec s : Cells())
        for (const char *dir : kDirections)
            for (int layout = 0; layout <= 1; layout++)
                for (int init = 0; init <= 1; init++) {
                    s.direction = dir;
                    s.layout = layout;
                    s.h0 = s.c0 = init != 0;
                    s.seed = (unsigned)(layout * 7 + init * 3 + 11);
                    Check(s);
                }
}

TEST(OnnxRnn, Opset7HasNoLayoutAttribute) {
    for (Spec s : Cells())
        for (const char *dir : kDirections) {
            s.opset = 7;
            s.direction = dir;
            s.h0 = s.c0 = true;
            Check(s);
        }
}

TEST(OnnxRnn, WithoutBiasOrHiddenSizeAttribute) {
    for (Spec s : Cells())
        for (int layout = 0; layout <= 1; layout++) {
            s.bias = false;
            s.hidden_attr = false;
            s.layout = layout;
            s.direction = "bidirectional";
            Check(s);
        }
}

TEST(OnnxRnn, BatchOfOneAndOneStep) {
    for (Spec s : Cells())
        for (const char *dir : kDirections)
            for (int layout = 0; layout <= 1; layout++) {
                s.direction = dir;
                s.layout = layout;
                s.batch = 1;
                Check(s);
                s.batch = 2;
                s.seq = 1;
                s.h0 = true;
                Check(s);
            }
}

TEST(OnnxRnn, SequenceLengthsOfEveryKind) {
    // unsorted, with a 0 and a full length; all full (the fast path); all
    // equal but short; increasing.
    const std::vector<std::vector<int32_t>> lens = {
        {3, 5, 0, 1}, {5, 5, 5, 5}, {2, 2, 2, 2}, {1, 2, 3, 4}};
    for (Spec s : Cells())
        for (const char *dir : kDirections)
            for (int layout = 0; layout <= 1; layout++)
                for (const auto &l : lens) {
                    s.batch = 4;
                    s.direction = dir;
                    s.layout = layout;
                    s.lens = l;
                    s.h0 = s.c0 = (layout == 1);
                    Check(s);
                }
}

TEST(OnnxRnn, SequenceLengthsWithoutY) {
    for (Spec s : Cells())
        for (const char *dir : kDirections) {
            s.batch = 4;
            s.direction = dir;
            s.lens = {4, 0, 5, 2};
            s.h0 = s.c0 = true;
            s.outputs = s.op == "LSTM" ? std::vector<bool>{false, true, true}
                                       : std::vector<bool>{false, true};
            Check(s);
        }
}

TEST(OnnxRnn, OptionalOutputs) {
    for (Spec s : Cells())
        for (int layout = 0; layout <= 1; layout++) {
            s.layout = layout;
            s.direction = "bidirectional";
            s.outputs = {true};
            Check(s);
            s.outputs = {false, true};
            Check(s);
            if (s.op == "LSTM") {
                s.outputs = {false, false, true};
                Check(s);
                s.outputs = {true, false, true};
                Check(s);
            }
        }
}

TEST(OnnxRnn, EmptySequenceGivesInitialState) {
    for (Spec s : Cells()) {
        s.seq = 0;
        s.direction = "bidirectional";
        s.h0 = s.c0 = true;
        Check(s);
        s.h0 = s.c0 = false;
        Check(s);
    }
}

TEST(OnnxRnn, LstmPeepholesInputForgetAndClip) {
    Spec s;
    s.op = "LSTM";
    for (const char *dir : kDirections)
        for (int layout = 0; layout <= 1; layout++)
            for (int variant = 0; variant < 6; variant++) {
                s.direction = dir;
                s.layout = layout;
                s.h0 = s.c0 = true;
                s.peepholes = variant & 1;
                s.input_forget = variant >= 2 && variant < 4;
                s.clip = variant >= 4 ? 0.6f : 0.0f;
                s.lens.clear();
                Check(s);
                s.batch = 4;
                s.lens = {2, 5, 0, 3};
                Check(s);
                s.batch = 3;
            }
}

TEST(OnnxRnn, ClipOnEveryCell) {
    for (Spec s : Cells())
        for (const char *dir : kDirections) {
            s.direction = dir;
            s.clip = 0.4f;
            s.h0 = true;
            Check(s);
        }
}

TEST(OnnxRnn, ExplicitActivations) {
    Spec rnn;
    rnn.op = "RNN";
    rnn.direction = "bidirectional";
    rnn.acts = {"LeakyRelu", "HardSigmoid"};
    rnn.alphas = {0.3f, 0.25f};
    rnn.betas = {0.4f};
    Check(rnn);
    rnn.acts = {"Relu", "Softsign"};
    rnn.alphas.clear();
    rnn.betas.clear();
    Check(rnn);
    rnn.acts = {"ScaledTanh", "Affine"};
    rnn.alphas = {1.5f, 0.7f};
    rnn.betas = {0.5f, -0.2f};
    Check(rnn);
    rnn.direction = "reverse";
    rnn.acts = {"elu"}; // names match without case
    rnn.alphas = {0.5f};
    rnn.betas.clear();
    Check(rnn);

    Spec gru;
    gru.op = "GRU";
    gru.direction = "bidirectional";
    gru.acts = {"HardSigmoid", "Softsign", "Sigmoid", "ScaledTanh"};
    gru.alphas = {0.3f, 0.9f};
    gru.betas = {0.45f, 1.2f};
    for (int lbr = 0; lbr <= 1; lbr++) {
        gru.lbr = lbr != 0;
        Check(gru);
        gru.batch = 4;
        gru.lens = {1, 5, 3, 0};
        Check(gru);
        gru.batch = 3;
        gru.lens.clear();
    }

    Spec lstm;
    lstm.op = "LSTM";
    lstm.direction = "bidirectional";
    lstm.acts = {"Sigmoid",     "Tanh", "Softplus",
                 "HardSigmoid", "Elu",  "ThresholdedRelu"};
    lstm.alphas = {0.25f, 0.8f, 0.1f};
    lstm.betas = {0.55f};
    lstm.peepholes = true;
    Check(lstm);
    lstm.layout = 1;
    lstm.acts = {"Sigmoid", "Affine", "ScaledTanh"};
    lstm.alphas = {0.5f, 1.1f};
    lstm.betas = {0.1f, 0.9f};
    Check(lstm); // one list serves both directions
}

TEST(OnnxRnn, LargerShapes) {
    for (Spec s : Cells()) {
        s.seq = 17;
        s.batch = 9;
        s.input = 13;
        s.hidden = 24;
        s.direction = "bidirectional";
        s.h0 = s.c0 = true;
        Check(s);
        s.layout = 1;
        s.lens = {17, 3, 9, 17, 1, 0, 16, 8, 8};
        Check(s);
    }
}

TEST(OnnxRnn, FastPathWritesYInPlace) {
    // Layout 0 with full sequences and Y present keeps H in Y itself: no
    // per-step state in the workspace, unlike layout 1.
    Spec s;
    s.op = "GRU";
    s.seq = 50;
    s.batch = 8;
    s.hidden = 32;
    size_t direct = Check(s);
    s.layout = 1;
    size_t copied = Check(s);
    EXPECT_GE(copied, direct + (size_t)(s.seq * s.batch * s.hidden) * 4);
}

TEST(OnnxRnn, Errors) {
    std::string msg;
    Spec s;
    s.op = "RNN";
    s.acts = {"Gelu"};
    EXPECT_EQ(FailCode(s, &msg), OSP_ERROR_UNSUPPORTED);
    EXPECT_NE(msg.find("Gelu"), std::string::npos) << msg;

    s = Spec();
    s.direction = "sideways";
    EXPECT_EQ(FailCode(s, &msg), OSP_ERROR_INVALID_ARG);
    EXPECT_NE(msg.find("direction"), std::string::npos) << msg;

    s = Spec();
    s.op = "GRU";
    s.acts = {"Sigmoid", "Tanh", "Tanh"};
    EXPECT_EQ(FailCode(s, &msg), OSP_ERROR_INVALID_ARG);
    EXPECT_NE(msg.find("activations"), std::string::npos) << msg;

    s = Spec();
    s.lens = {1, 2, 3};
    s.lens_known = false;
    EXPECT_EQ(FailCode(s, &msg), OSP_ERROR_INVALID_ARG);
    EXPECT_NE(msg.find("must be known"), std::string::npos) << msg;

    s = Spec();
    s.lens = {1, 6, 3};
    EXPECT_EQ(FailCode(s, &msg), OSP_ERROR_INVALID_ARG);
    EXPECT_NE(msg.find("sequence_lens"), std::string::npos) << msg;

    s = Spec();
    s.hidden_attr = true;
    s.layout = 2;
    EXPECT_EQ(FailCode(s, &msg), OSP_ERROR_INVALID_ARG);

    // W of the wrong height for the hidden size the attribute names
    {
        Spec t;
        t.op = "LSTM";
        Inputs in = MakeInputs(t);
        Attrs a = MakeAttrs(t);
        a.list()[0].i = 5; // hidden_size
        OpResult run;
        osp_error *err =
            RunOp("LSTM", 14, a, InputList(t, in), {true, true, true}, &run);
        ASSERT_NE(err, nullptr);
        EXPECT_EQ(osp_error_get_code(err), OSP_ERROR_INVALID_ARG);
        EXPECT_NE(TakeMessage(err).find("input W"), std::string::npos);
    }
    // FP64 X
    {
        Spec t;
        Inputs in = MakeInputs(t);
        in.x.dtype = OSP_TYPE_FP64;
        in.x.bytes.resize(in.x.bytes.size() * 2);
        OpResult run;
        osp_error *err = RunOp("LSTM", 14, MakeAttrs(t), InputList(t, in),
                               {true, true, true}, &run);
        ASSERT_NE(err, nullptr);
        EXPECT_EQ(osp_error_get_code(err), OSP_ERROR_UNSUPPORTED);
        EXPECT_NE(TakeMessage(err).find("FP32"), std::string::npos);
    }
    // below opset 7 nothing serves
    EXPECT_EQ(Find("LSTM", 6), nullptr);
    EXPECT_NE(Find("GRU", 7), nullptr);
    EXPECT_NE(Find("RNN", 14), nullptr);
}

} // namespace
