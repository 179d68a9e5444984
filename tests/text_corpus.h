#pragma once

// Small byte corpora for the text-lm tests: "sources" of fortunes, lines of words drawn
// from a list by a seeded generator (the default: about a hundred 129-byte windows).

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace quartet::test_util {

// A text-lm corpus under `folder`: a file per source of `fortunes` fortunes, each 24
// words drawn from `words` by a generator seeded with `seed`, 8 to a line, ending with "%".
inline void write_word_corpus(const std::filesystem::path& folder, const std::vector<std::string>& sources,
                              int fortunes, uint64_t seed, const std::vector<std::string>& words) {
  std::filesystem::create_directories(folder);
  uint64_t state = seed;
  for (const std::string& source : sources) {
    std::ofstream out(folder / source);
    for (int fortune = 0; fortune < fortunes; ++fortune) {
      for (int w = 0; w < 24; ++w) {
        state = state * 6364136223846793005ULL + 1442695040888963407ULL;
        out << words[(state >> 33) % words.size()] << (w % 8 == 7 ? "\n" : " ");
      }
      out << "%\n";
    }
  }
}

// `dir`/alpha and `dir`/beta, 60 fortunes each of eleven words; `seed` seeds the words.
inline void write_word_corpus(const std::filesystem::path& dir, uint64_t seed) {
  write_word_corpus(dir, {"alpha", "beta"}, 60, seed,
                    {"the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "and", "runs"});
}

}  // namespace quartet::test_util
