// Writes one valid input per decoder (fuzz/frame_fuzz.cpp's layout: a selector byte,
// then the payload) into the directory given, as a starting corpus.

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "transport/messages.h"

using namespace quartet::transport;

namespace {

void write(const std::string& dir, const std::string& name, uint8_t selector, const std::vector<std::byte>& payload) {
  std::ofstream out(dir + "/seed-" + name, std::ios::binary);
  out.put(static_cast<char>(selector));
  out.write(reinterpret_cast<const char*>(payload.data()), static_cast<std::streamsize>(payload.size()));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  write(dir, "hello", 0, encode_message(Hello{make_token(), "client", kProtocolVersion}));
  write(dir, "welcome", 1, encode_message(Welcome{1, 4, R"({"lr":0.1})"}));
  write(dir, "error", 2, encode_message(ErrorMessage{"wrong token"}));
  write(dir, "kv", 3, encode_message(KeyValue{"rank/0", {std::byte{1}, std::byte{2}, std::byte{3}}}));
  const TensorsMessage tensors{{"w", "b"}, {{2, 2}, {2}}, {{1, 2, 3, 4}, {5, 6}}};
  const EncodedTensors encoded = encode_tensors(tensors);
  std::vector<std::byte> payload;
  for (const auto& piece : encoded.pieces()) payload.insert(payload.end(), piece.begin(), piece.end());
  write(dir, "tensors", 4, payload);
  // A whole frame too: header + hello payload (selector byte = the magic's first byte).
  const auto hello = encode_message(Hello{make_token(), "rank", kProtocolVersion});
  std::byte header[kFrameHeaderBytes];
  encode_header(MessageType::hello, hello, header);
  std::ofstream frame(dir + "/seed-frame", std::ios::binary);
  frame.write(reinterpret_cast<const char*>(header), kFrameHeaderBytes);
  frame.write(reinterpret_cast<const char*>(hello.data()), static_cast<std::streamsize>(hello.size()));
  return 0;
}
