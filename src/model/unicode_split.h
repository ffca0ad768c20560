// The Qwen2 pre-tokenizer: splits text into the pieces BPE then works on, as the pattern
//   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
// does with leftmost-first alternation and greedy backtracking quantifiers, written by hand over
// code points (std::regex knows no \p{L}). Like llama.cpp, the contractions match ASCII letters
// of either case only.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace bankml::unicode {

// The lengths, in code points, of the consecutive pieces that cover cps.
std::vector<size_t> split_qwen2(std::span<const uint32_t> cps);

}  // namespace bankml::unicode
