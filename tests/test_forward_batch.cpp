// The batched decode step (model::decode_batch): sequences at different positions, joining and
// leaving the batch at different steps, get exactly the logits that each sequence's own
// eval_into() gives, on every tiny model, at 1 and 2 threads, with the f16 and the f32 cache; and
// a refused step (bad token, full context, a model twice, another file) changes no cache.
#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

#include "core/error.h"
#include "model/forward.h"
#include "test.h"

using namespace bankml;
using model::DecodeSeq;
using model::Model;
using model::ModelOptions;

namespace {

std::unique_ptr<Model> open(const std::string& name, int threads, bool kv_f32, int ctx = 128) {
    ModelOptions o;
    o.threads = threads;
    o.ctx = ctx;
    o.kv_f32 = kv_f32;
    return Model::open(bt::data_path(name), o);
}

int32_t argmax(const std::vector<float>& l) {
    size_t best = 0;
    for (size_t i = 1; i < l.size(); i++)
        if (l[i] > l[best]) best = i;
    return (int32_t)best;
}

// One sequence: its prompt, the step at which it joins the batch, how many tokens it decodes.
struct Seq {
    std::vector<int32_t> prompt;
    int start, steps;
};

// Each sequence alone: the tokens it decodes (greedy from its own logits, the first from the
// prompt's) and the logits of every decode step.
struct Alone {
    std::vector<int32_t> tokens;
    std::vector<std::vector<float>> logits;
};

Alone run_alone(Model& m, const Seq& s) {
    Alone a;
    m.reset();
    std::vector<float> l = m.eval(s.prompt);
    for (int i = 0; i < s.steps; i++) {
        a.tokens.push_back(argmax(l));
        m.eval_into(std::span<const int32_t>(&a.tokens.back(), 1), l);
        a.logits.push_back(l);
    }
    return a;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

const std::vector<Seq> SEQS = {
    {{1}, 0, 14},                                            // position 1 on, the whole run
    {{5, 900, 17}, 0, 6},                                    // leaves early
    {{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20}, 3, 9},  // joins late, far ahead
    {{300, 301, 302, 303, 304, 305, 306, 307}, 5, 11},       // joins later, outlives the first
    {{42, 43}, 8, 1},                                        // one step alone with the others
};

}  // namespace

TEST(forward_batch_decode_gives_each_sequence_its_own_bits) {
    for (const char* name : {"tiny-q1_0.gguf", "tiny-q2_0.gguf", "tiny-f16.gguf"}) {
        for (int threads : {1, 2}) {
            for (bool kv32 : {false, true}) {
                auto ref = open(name, threads, kv32);
                std::vector<Alone> alone;
                for (const Seq& s : SEQS) alone.push_back(run_alone(*ref, s));

                std::vector<std::unique_ptr<Model>> ms;
                std::vector<std::vector<float>> logits(SEQS.size());
                for (size_t i = 0; i < SEQS.size(); i++) ms.push_back(open(name, threads, kv32));
                int last = 0;
                for (const Seq& s : SEQS) last = std::max(last, s.start + s.steps);
                size_t compared = 0, most = 0;
                for (int step = 0; step < last; step++) {
                    std::vector<DecodeSeq> batch;
                    std::vector<size_t> who;
                    for (size_t i = 0; i < SEQS.size(); i++) {
                        const Seq& s = SEQS[i];
                        if (step == s.start) ms[i]->eval_into(s.prompt, logits[i]);
                        if (step < s.start || step >= s.start + s.steps) continue;
                        batch.push_back({ms[i].get(), alone[i].tokens[(size_t)(step - s.start)], &logits[i]});
                        who.push_back(i);
                    }
                    // The order in the batch must not matter either: reverse it on odd steps.
                    if (step % 2) {
                        std::reverse(batch.begin(), batch.end());
                        std::reverse(who.begin(), who.end());
                    }
                    model::decode_batch(batch);
                    most = std::max(most, batch.size());
                    for (size_t b = 0; b < who.size(); b++) {
                        const size_t i = who[b];
                        const size_t k = (size_t)(step - SEQS[i].start);
                        CHECK(same_bits(logits[i], alone[i].logits[k]));
                        CHECK_EQ(ms[i]->n_past(), (int)(SEQS[i].prompt.size() + k + 1));
                        compared++;
                    }
                }
                size_t want = 0;
                for (const Seq& s : SEQS) want += (size_t)s.steps;
                CHECK_EQ(compared, want);
                CHECK_GE(most, (size_t)4);
            }
        }
    }
}

// More sequences than one pass through the layers takes (64): the step runs them in groups.
TEST(forward_batch_decode_past_one_group_of_64) {
    const size_t N = 70;
    auto ref = open("tiny-q1_0.gguf", 2, false, 16);
    std::vector<std::unique_ptr<Model>> ms;
    std::vector<std::vector<float>> logits(N), want(N);
    std::vector<DecodeSeq> batch;
    for (size_t i = 0; i < N; i++) {
        ms.push_back(open("tiny-q1_0.gguf", 2, false, 16));
        const std::vector<int32_t> prompt = {int32_t(i % 1000), int32_t((7 * i) % 1000)};
        ms.back()->eval_into(std::span<const int32_t>(prompt.data(), 1 + i % 2), logits[i]);
        const int32_t tok = int32_t((13 * i + 5) % 1000);
        ref->reset();
        ref->eval_into(std::span<const int32_t>(prompt.data(), 1 + i % 2), want[i]);
        ref->eval_into(std::span<const int32_t>(&tok, 1), want[i]);
        batch.push_back({ms.back().get(), tok, &logits[i]});
    }
    model::decode_batch(batch);
    size_t same = 0;
    for (size_t i = 0; i < N; i++) same += same_bits(logits[i], want[i]);
    CHECK_EQ(same, N);
}

TEST(forward_batch_decode_refuses_bad_steps_and_changes_nothing) {
    auto a = open("tiny-q1_0.gguf", 1, false, 4);
    auto b = open("tiny-q1_0.gguf", 1, false, 4);
    auto other = open("tiny-q2_0.gguf", 1, false, 4);
    std::vector<float> la, lb, lo;
    a->eval_into(std::vector<int32_t>{1, 2}, la);
    b->eval_into(std::vector<int32_t>{3}, lb);
    other->eval_into(std::vector<int32_t>{3}, lo);
    auto refused = [&](std::vector<DecodeSeq> seqs, const std::string& says) {
        CHECK_THROWS(model::decode_batch(seqs), says);
        CHECK_EQ(a->n_past(), 2);
        CHECK_EQ(b->n_past(), 1);
        CHECK_EQ(other->n_past(), 1);
    };
    refused({{a.get(), 5, &la}, {b.get(), 1024, &lb}}, "sequence 1: token id 1024 is out of range");
    refused({{a.get(), 5, &la}, {b.get(), -1, &lb}}, "token id -1");
    refused({{a.get(), 5, &la}, {a.get(), 6, &la}}, "sequence 1: the same model as sequence 0");
    refused({{b.get(), 5, &lb}, {other.get(), 6, &lo}}, "is not the file of the others");
    refused({{a.get(), 5, &la}, {nullptr, 6, &lb}}, "sequence 1 has no model");
    // Fill a's context (4): two steps fit, the third is refused.
    model::decode_batch(std::vector<DecodeSeq>{{a.get(), 5, &la}});
    model::decode_batch(std::vector<DecodeSeq>{{a.get(), 6, &la}, {b.get(), 7, &lb}});
    CHECK_EQ(a->n_past(), 4);
    CHECK_THROWS(model::decode_batch(std::vector<DecodeSeq>{{b.get(), 8, &lb}, {a.get(), 9, &la}}),
                 "sequence 1: context full: 4 cached");
    CHECK_EQ(b->n_past(), 2);
    // An empty step does nothing.
    model::decode_batch({});
}
