// libFuzzer target for everything that parses bytes from the network: frame headers
// and payload checks, the cereal message decoders, and the tensors decoder. Besides
// "no crash, no sanitizer report, no unbounded allocation" it checks two properties:
// the SSE4.2 and table CRCs agree, and whatever decodes re-encodes to the same bytes.
//
// Build and run: fuzz/run (clang++ with -fsanitize=fuzzer,address,undefined).

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

#include "transport/frame.h"
#include "transport/messages.h"

using namespace quartet::transport;

namespace {

void require(bool ok) {
  if (!ok) std::abort();
}

template <class T>
void decode_and_reencode(std::span<const std::byte> payload) {
  try {
    const T message = decode_message<T>(payload);
    const auto again = encode_message(message);
    require(again.size() == payload.size() && std::memcmp(again.data(), payload.data(), payload.size()) == 0);
  } catch (const MessageError&) {
  }
}

void tensors(std::span<const std::byte> payload) {
  try {
    const TensorsMessage message = decode_tensors(payload);
    const EncodedTensors encoded = encode_tensors(message);
    std::vector<std::byte> again;
    for (const auto& piece : encoded.pieces()) again.insert(again.end(), piece.begin(), piece.end());
    require(again.size() == payload.size() && std::memcmp(again.data(), payload.data(), payload.size()) == 0);
  } catch (const MessageError&) {
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const std::byte> input(reinterpret_cast<const std::byte*>(data), size);
  require(crc32c(input) == detail::crc32c_portable(input));

  if (size >= kFrameHeaderBytes) {
    // A frame as Connection::receive sees it, with a limit taken from the input so the
    // fuzzer explores both sides of it.
    const auto header_bytes = std::span<const std::byte, kFrameHeaderBytes>(input.data(), kFrameHeaderBytes);
    const uint32_t limit = static_cast<uint32_t>(size * 2);
    try {
      const FrameHeader header = decode_header(header_bytes, limit);
      require(header.length <= limit);
      const auto payload = input.subspan(kFrameHeaderBytes);
      if (payload.size() >= header.length) check_payload(header, payload.first(header.length));
    } catch (const FrameError&) {
    }
  }

  // Every decoder on the whole input: the first byte picks one, the rest is the payload.
  if (size == 0) return 0;
  const auto payload = input.subspan(1);
  switch (data[0] % 5) {
    case 0: decode_and_reencode<Hello>(payload); break;
    case 1: decode_and_reencode<Welcome>(payload); break;
    case 2: decode_and_reencode<ErrorMessage>(payload); break;
    case 3: decode_and_reencode<KeyValue>(payload); break;
    case 4: tensors(payload); break;
  }
  return 0;
}
