#include "model/tokenizer.h"

#include <algorithm>
#include <cstdio>
#include <queue>

#include "core/error.h"
#include "core/utf8.h"
#include "model/unicode.h"
#include "model/unicode_split.h"

namespace bankml::model {


// Tokens llama.cpp ends generation at by their text (besides the file's EOS/EOT ids).
static const char* const EOG_TEXTS[] = {
    "<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end|>", "<end_of_turn>", "<|eom_id|>",
    "<|end_of_text|>", "<EOT>", "<|fim_pad|>", "<|repo_name|>", "<|fim_repo|>", "<|file_sep|>",
};

Tokenizer::Tokenizer(VocabData v)
    : tokens_(std::move(v.tokens)), bos_(v.bos), eos_(v.eos), add_bos_(v.add_bos), chat_template_(std::move(v.chat_template)) {
    if (v.model != "gpt2")
        throw Error("tokenizer: model '" + utf8::escape(v.model, 80) + "' is not supported (only gpt2 byte-level BPE)");
    if (v.pre != "qwen2")
        throw Error("tokenizer: pre-tokenizer '" + utf8::escape(v.pre, 80) + "' is not supported (only qwen2)");
    if (tokens_.empty()) throw Error("tokenizer: the vocabulary is empty");
    if (!v.types.empty() && v.types.size() != tokens_.size())
        throw Error("tokenizer: " + std::to_string(v.types.size()) + " token types for " +
                    std::to_string(tokens_.size()) + " tokens");
    const int32_t n = int32_t(tokens_.size());
    for (int32_t* id : {&bos_, &eos_, &v.eot, &v.pad})
        if (*id >= n) *id = -1;  // as llama.cpp: an id outside the vocabulary is no id

    types_.resize(tokens_.size(), TokenType::Normal);
    ids_.reserve(tokens_.size());
    for (int32_t i = 0; i < n; ++i) {
        if (!v.types.empty()) {
            int32_t t = v.types[i];
            types_[i] = t >= 1 && t <= 6 ? TokenType(t) : TokenType::Undefined;
        }
        if (!ids_.emplace(std::string_view(tokens_[i]), i).second)
            throw Error("tokenizer: duplicate token '" + utf8::escape(tokens_[i], 80) + "' (ids " +
                        std::to_string(ids_[tokens_[i]]) + " and " + std::to_string(i) + ")");
    }

    ranks_.reserve(v.merges.size());
    for (size_t r = 0; r < v.merges.size(); ++r) {
        const std::string& m = v.merges[r];
        size_t sp = m.find(' ', 1);
        if (sp == std::string::npos || sp + 1 >= m.size())
            throw Error("tokenizer: merge " + std::to_string(r) + " '" + utf8::escape(m, 80) + "' is not 'left right'");
        ranks_.emplace(m, int(r));  // a repeated merge keeps its first (best) rank
    }

    for (const char* t : EOG_TEXTS) {
        int32_t id = find(t);
        if (id < 0) continue;
        eog_.insert(id);
        if (types_[id] != TokenType::Control) types_[id] = TokenType::Control;
    }
    for (int32_t id : {eos_, v.eot})
        if (id >= 0) eog_.insert(id);

    for (int32_t i = 0; i < n; ++i) {
        TokenType t = types_[i];
        if (t == TokenType::Control || t == TokenType::UserDefined || t == TokenType::Unknown) special_.push_back(i);
    }
    std::stable_sort(special_.begin(), special_.end(),
                     [&](int32_t a, int32_t b) { return tokens_[a].size() > tokens_[b].size(); });
}

const std::string& Tokenizer::token_text(int32_t id) const {
    if (id < 0 || id >= n_vocab())
        throw Error("token id " + std::to_string(id) + " is outside the vocabulary (0.." + std::to_string(n_vocab() - 1) + ")");
    return tokens_[id];
}

TokenType Tokenizer::type(int32_t id) const {
    token_text(id);
    return types_[id];
}

int32_t Tokenizer::find(std::string_view text) const {
    auto it = ids_.find(text);
    return it == ids_.end() ? -1 : it->second;
}

int Tokenizer::rank(std::string_view left, std::string_view right) const {
    std::string key;
    key.reserve(left.size() + 1 + right.size());
    key.append(left).append(1, ' ').append(right);
    auto it = ranks_.find(key);
    return it == ranks_.end() ? -1 : it->second;
}

// Merges one pre-tokenized piece (already in the byte-level alphabet): the adjacent pair of
// lowest rank first, the leftmost among equals, until no pair has a merge.
void Tokenizer::bpe(std::string_view word, std::vector<int32_t>& out) const {
    struct Sym {
        size_t start, len;
        int prev, next;
    };
    std::vector<Sym> sym;
    for (size_t o = 0; o < word.size();) {
        size_t l = std::max<size_t>(1, utf8::sequence_length(word.substr(o)));
        int i = int(sym.size());
        sym.push_back({o, l, i - 1, -1});
        if (i > 0) sym[i - 1].next = i;
        o += l;
    }
    struct Pair {
        int rank, left, right;
        size_t left_len, right_len;
    };
    auto worse = [](const Pair& a, const Pair& b) { return a.rank != b.rank ? a.rank > b.rank : a.left > b.left; };
    std::priority_queue<Pair, std::vector<Pair>, decltype(worse)> queue(worse);
    auto text = [&](int i) { return word.substr(sym[i].start, sym[i].len); };
    auto consider = [&](int l, int r) {
        if (l < 0 || r < 0) return;
        int rk = rank(text(l), text(r));
        if (rk >= 0) queue.push({rk, l, r, sym[l].len, sym[r].len});
    };
    for (int i = 1; i < int(sym.size()); ++i) consider(i - 1, i);
    while (!queue.empty()) {
        Pair p = queue.top();
        queue.pop();
        Sym &l = sym[p.left], &r = sym[p.right];
        // Stale: one side was merged into something else since this pair was queued.
        if (l.len == 0 || r.len == 0 || l.next != p.right || l.len != p.left_len || r.len != p.right_len) continue;
        l.len += r.len;
        r.len = 0;
        l.next = r.next;
        if (r.next >= 0) sym[r.next].prev = p.left;
        consider(l.prev, p.left);
        consider(p.left, l.next);
    }
    for (int i = 0; i >= 0 && i < int(sym.size()); i = sym[i].next) {
        std::string_view s = text(i);
        int32_t id = find(s);
        if (id >= 0) {
            out.push_back(id);
            continue;
        }
        // A symbol with no token (a vocabulary without every byte): its single bytes, where known.
        for (char c : s) {
            int32_t b = find(std::string_view(&c, 1));
            if (b >= 0) out.push_back(b);
        }
    }
}

void Tokenizer::encode_text(std::string_view text, std::vector<int32_t>& out) const {
    std::vector<uint32_t> cps = utf8::decode(text);
    std::vector<size_t> lens = unicode::split_qwen2(cps);
    size_t p = 0;
    std::string utf8, word;
    for (size_t len : lens) {
        utf8.clear();
        word.clear();
        for (size_t i = p; i < p + len; ++i) utf8::append(utf8, cps[i]);
        for (unsigned char b : utf8) utf8::append(word, unicode::byte_to_cp(b));
        bpe(word, out);
        p += len;
    }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool parse_special, bool add_bos) const {
    // Fragments of the text still to tokenize (id < 0) or already a special token (id >= 0).
    struct Frag {
        int32_t id;
        size_t off, len;
    };
    std::vector<Frag> frags;
    if (!text.empty()) frags.push_back({-1, 0, text.size()});
    for (int32_t sid : special_) {
        TokenType t = types_[sid];
        if (!parse_special && (t == TokenType::Control || t == TokenType::Unknown)) continue;
        const std::string& st = tokens_[sid];
        std::vector<Frag> next;
        next.reserve(frags.size());
        for (const Frag& f : frags) {
            if (f.id >= 0) {
                next.push_back(f);
                continue;
            }
            size_t pos = f.off, end = f.off + f.len;
            while (true) {
                size_t m = text.substr(0, end).find(st, pos);
                if (m == std::string_view::npos) break;
                if (m > pos) next.push_back({-1, pos, m - pos});
                next.push_back({sid, m, st.size()});
                pos = m + st.size();
            }
            if (pos < end) next.push_back({-1, pos, end - pos});
        }
        frags.swap(next);
    }
    std::vector<int32_t> out;
    if (add_bos && add_bos_ && bos_ >= 0) out.push_back(bos_);
    for (const Frag& f : frags) {
        if (f.id >= 0) out.push_back(f.id);
        else encode_text(text.substr(f.off, f.len), out);
    }
    return out;
}

std::string Tokenizer::piece(int32_t id, bool special) const {
    const std::string& t = token_text(id);
    switch (types_[id]) {
        case TokenType::Control:
        case TokenType::Unknown: return special ? t : std::string();
        case TokenType::UserDefined: return t;
        case TokenType::Normal: {
            std::string out;
            for (uint32_t cp : utf8::decode(t)) {
                int b = unicode::cp_to_byte(cp);
                if (b >= 0) {
                    out += char(b);
                } else {  // not in the byte-level alphabet: say so rather than guess (as llama.cpp)
                    char buf[16];
                    std::snprintf(buf, sizeof buf, "[UNK_BYTE_0x%X]", cp);
                    out += buf;
                }
            }
            return out;
        }
        case TokenType::Byte: {  // "<0xAB>"
            unsigned v = 0;
            if (t.size() == 6 && std::sscanf(t.c_str(), "<0x%2X>", &v) == 1) return std::string(1, char(v));
            return std::string();
        }
        default: return std::string();  // unused and undefined tokens print nothing
    }
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool special) const {
    std::string out;
    for (int32_t id : ids) out += piece(id, special);
    return out;
}

std::string StreamDecoder::push(int32_t id) {
    held_ += tok_.piece(id, special_);
    size_t n = utf8::stable_prefix(held_);
    std::string out = utf8::sanitize(std::string_view(held_).substr(0, n));
    held_.erase(0, n);
    return out;
}

std::string StreamDecoder::flush() {
    std::string out = utf8::sanitize(held_);
    held_.clear();
    return out;
}

}  // namespace bankml::model
