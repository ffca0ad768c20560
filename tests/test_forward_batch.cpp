// The batched forward pass (model::decode_batch): sequences at different positions, joining and
// leaving the batch at different steps, their prompts cut into pieces that ride along with the
// others' decoded tokens, get exactly the logits that each sequence's own eval_into() gives, on
// every tiny model, at 1 and 2 threads, with the f16 and the f32 cache; and a refused step (bad
// token, full context, a model twice, another file) changes no cache.
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
    std::vector<float> prompt_logits;
    std::vector<int32_t> tokens;
    std::vector<std::vector<float>> logits;
};

Alone run_alone(Model& m, const Seq& s) {
    Alone a;
    m.reset();
    std::vector<float> l = m.eval(s.prompt);
    a.prompt_logits = l;
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
                        // The prompt: all but its last 3 tokens on their own, in one step with no
                        // logits; the last 3 in the step before the first decoded token.
                        if (step == s.start) {
                            const std::span<const int32_t> p(s.prompt);
                            const size_t head = p.size() > 3 ? p.size() - 3 : 0;
                            if (head) model::decode_batch(std::vector<DecodeSeq>{{ms[i].get(), p.first(head), nullptr}});
                            model::decode_batch(std::vector<DecodeSeq>{{ms[i].get(), p.subspan(head), &logits[i]}});
                            CHECK(same_bits(logits[i], alone[i].prompt_logits));
                        }
                        if (step < s.start || step >= s.start + s.steps) continue;
                        batch.push_back({ms[i].get(), std::span<const int32_t>(&alone[i].tokens[(size_t)(step - s.start)], 1),
                                         &logits[i]});
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

// More rows than one pass through the layers takes (64): the step runs them in passes.
TEST(forward_batch_decode_past_one_group_of_64) {
    const size_t N = 70;
    auto ref = open("tiny-q1_0.gguf", 2, false, 16);
    std::vector<std::unique_ptr<Model>> ms;
    std::vector<std::vector<float>> logits(N), want(N);
    std::vector<int32_t> toks(N);
    std::vector<DecodeSeq> batch;
    for (size_t i = 0; i < N; i++) {
        ms.push_back(open("tiny-q1_0.gguf", 2, false, 16));
        const std::vector<int32_t> prompt = {int32_t(i % 1000), int32_t((7 * i) % 1000)};
        ms.back()->eval_into(std::span<const int32_t>(prompt.data(), 1 + i % 2), logits[i]);
        toks[i] = int32_t((13 * i + 5) % 1000);
        ref->reset();
        ref->eval_into(std::span<const int32_t>(prompt.data(), 1 + i % 2), want[i]);
        ref->eval_into(std::span<const int32_t>(&toks[i], 1), want[i]);
        batch.push_back({ms.back().get(), std::span<const int32_t>(&toks[i], 1), &logits[i]});
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
    const int32_t t5 = 5, t6 = 6, t7 = 7, t1024 = 1024, tm1 = -1;
    auto one = [](const int32_t& t) { return std::span<const int32_t>(&t, 1); };
    refused({{a.get(), one(t5), &la}, {b.get(), one(t1024), &lb}}, "sequence 1: token id 1024 at index 0 is out of range");
    refused({{a.get(), one(t5), &la}, {b.get(), one(tm1), &lb}}, "token id -1");
    refused({{a.get(), one(t5), &la}, {a.get(), one(t6), &la}}, "sequence 1: the same model as sequence 0");
    refused({{b.get(), one(t5), &lb}, {other.get(), one(t6), &lo}}, "is not the file of the others");
    refused({{a.get(), one(t5), &la}, {nullptr, one(t6), &lb}}, "sequence 1 has no model");
    refused({{a.get(), one(t5), &la}, {b.get(), {}, &lb}}, "sequence 1 has no tokens");
    // a's context is 4 and holds 2: two more tokens fit, three do not.
    const std::vector<int32_t> three = {5, 6, 7};
    refused({{b.get(), one(t5), &lb}, {a.get(), three, &la}}, "sequence 1: context full: 2 cached + 3 new tokens");
    model::decode_batch(std::vector<DecodeSeq>{{a.get(), one(t5), &la}});
    model::decode_batch(std::vector<DecodeSeq>{{a.get(), one(t6), &la}, {b.get(), one(t7), &lb}});
    CHECK_EQ(a->n_past(), 4);
    CHECK_EQ(b->n_past(), 2);
    CHECK_THROWS(model::decode_batch(std::vector<DecodeSeq>{{b.get(), one(t5), &lb}, {a.get(), one(t6), &la}}),
                 "sequence 1: context full: 4 cached + 1 new tokens");
    CHECK_EQ(b->n_past(), 2);
    // An empty step does nothing.
    model::decode_batch({});
}

// Whole prompts in one step beside decoded tokens: 150 tokens (cut into passes of 64), 40 and 30
// (which do not fit one pass together), a 1-token prompt, and two decoding sequences; then every
// sequence decodes together. Each gets its own eval_into()'s logits.
TEST(forward_batch_long_prompts_beside_decodes) {
    for (const char* name : {"tiny-q1_0.gguf", "tiny-q2_0.gguf"}) {
        auto ref = open(name, 2, false, 256);
        auto prompt = [](size_t n, int from) {
            std::vector<int32_t> p;
            for (size_t i = 0; i < n; i++) p.push_back(int32_t((from + 31 * i) % 1000));
            return p;
        };
        const std::vector<std::vector<int32_t>> prompts = {prompt(5, 1), prompt(150, 2), prompt(9, 3), prompt(40, 4),
                                                           prompt(30, 5), prompt(1, 6)};
        const std::vector<bool> decoding = {true, false, true, false, false, false};
        const int32_t next = 77, after = 78;
        // Alone: the prompt (the decoding ones: prompt and one token), then `after`.
        std::vector<std::vector<float>> want1(prompts.size()), want2(prompts.size());
        for (size_t i = 0; i < prompts.size(); i++) {
            ref->reset();
            ref->eval_into(prompts[i], want1[i]);
            if (decoding[i]) ref->eval_into(std::span<const int32_t>(&next, 1), want1[i]);
            ref->eval_into(std::span<const int32_t>(&after, 1), want2[i]);
        }
        std::vector<std::unique_ptr<Model>> ms;
        std::vector<std::vector<float>> got(prompts.size());
        std::vector<DecodeSeq> batch;
        for (size_t i = 0; i < prompts.size(); i++) {
            ms.push_back(open(name, 2, false, 256));
            if (decoding[i]) {
                ms.back()->eval_into(prompts[i], got[i]);
                batch.push_back({ms.back().get(), std::span<const int32_t>(&next, 1), &got[i]});
            } else {
                batch.push_back({ms.back().get(), prompts[i], &got[i]});
            }
        }
        model::decode_batch(batch);
        for (size_t i = 0; i < prompts.size(); i++) CHECK(same_bits(got[i], want1[i]));
        batch.clear();
        for (size_t i = 0; i < prompts.size(); i++)
            batch.push_back({ms[i].get(), std::span<const int32_t>(&after, 1), &got[i]});
        model::decode_batch(batch);
        for (size_t i = 0; i < prompts.size(); i++) {
            CHECK(same_bits(got[i], want2[i]));
            CHECK_EQ(ms[i]->n_past(), int(prompts[i].size() + (decoding[i] ? 2 : 1)));
        }
    }
}
