#pragma once

// A small byte corpus for the text-lm tests: two "sources" of fortunes, lines of words
// drawn from a fixed list by a seeded generator, about a hundred 129-byte windows.

#include <cstdint>
#include <filesystem>
#include <fstream>

namespace quartet::test_util {

// Writes `dir`/alpha and `dir`/beta, 60 fortunes of 24 words each; `state` seeds the words.
inline void write_word_corpus(const std::filesystem::path& dir, uint64_t state) {
  std::filesystem::create_directories(dir);
  const char* words[] = {"the", "quick", "brown", "fox", "jumps", "over", "a", "lazy", "dog", "and", "runs"};
  for (const char* source : {"alpha", "beta"}) {
    std::ofstream out(dir / source);
    for (int fortune = 0; fortune < 60; ++fortune) {
      for (int w = 0; w < 24; ++w) {
        state = state * 6364136223846793005ULL + 1442695040888963407ULL;
        out << words[(state >> 33) % 11] << (w % 8 == 7 ? "\n" : " ");
      }
      out << "%\n";
    }
  }
}

}  // namespace quartet::test_util
