#pragma once

// `quartet bench-collectives`: all-reduce (or all-to-all) bandwidth of our collectives,
// the way nccl-tests reports it. Starts a coordinator, spawns N rank processes of this
// very binary (`quartet bench-collectives-rank`, hidden; the token in the environment),
// and rank 0 prints, per size: bytes, elements, time, algbw and busbw (= algbw * 2(N-1)/N
// for all-reduce, (N-1)/N for all-to-all), and whether every element of the results was
// right; one table per rank count of --ranks (a list: 2,4). --op all_to_all: each rank's
// buffer of a size is N equal chunks, one for each rank (nccl-tests' alltoall). With --dtype fp16 the buffers
// stay float but travel as halves (Wire::f16): a size is bytes on the wire, so a size
// holds twice the elements of fp32's, as nccl-tests counts its half type.
// --hierarchical: the hierarchical all-reduce (shared memory within a host, Gloo between
// one leader per host), with rank 0's busbw per level beside a flat Gloo all-reduce's on
// the same ranks; --hosts H simulates H hosts on this machine (rank r on host r % H).

#include <cstdint>
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace quartet::runner {

inline constexpr const char* kBenchCollectivesRankCommand = "bench-collectives-rank";

struct BenchCollectivesOptions {
  std::string backend = "gloo";         // gloo, shm or nccl
  std::string op = "all_reduce";        // all_reduce, all_to_all
  bool hierarchical = false;            // backend "hierarchical", compared with flat gloo
  int hosts = 0;                        // simulated hosts (--hierarchical); 0: the real ones
  std::string ranks = "2";              // rank counts, a table each: "2,4"
  std::string sizes = "1M,16M,64M";     // bytes; K, M, G are powers of 1024
  std::string dtype = "fp32";           // what travels: fp32, or fp16 (Wire::f16; gloo, shm)
  int iters = 20;                       // timed all-reduces per size
  int warmup = 5;                       // untimed ones before
  std::string host = "127.0.0.1";       // coordinator and Gloo address of the ranks
  double timeout_s = 600.0;             // the whole benchmark; ranks are killed past it
};

// One rank, as spawned by bench_collectives_main (QUARTET_TOKEN in the environment).
struct BenchRankOptions {
  std::string coordinator;  // HOST:PORT
  std::string backend = "gloo";  // or "hierarchical"
  std::string op = "all_reduce";
  int rank = 0;
  int ranks = 2;
  std::string sizes = "1M,16M,64M";
  std::string dtype = "fp32";
  int iters = 20;
  int warmup = 5;
  std::string gloo_host = "127.0.0.1";
};

// "1M,16M,64M" -> {1048576, 16777216, 67108864}. Throws InputError naming the bad item
// (not a size, zero, or not a multiple of 4 bytes).
std::vector<int64_t> parse_byte_sizes(const std::string& list);
// "2,4" -> {2, 4}. Throws InputError naming the bad item (not a whole number >= 1).
std::vector<int> parse_rank_counts(const std::string& list);

// Returns the exit code: 0 all checks passed, 1 a check or a rank failed, 2 bad input.
int bench_collectives_main(const BenchCollectivesOptions& options);
int bench_collectives_rank_main(const BenchRankOptions& options);

// Adds `bench-collectives` and the hidden rank command to `app`, bound to the options.
struct BenchCollectivesCommands {
  CLI::App* bench = nullptr;
  CLI::App* rank = nullptr;
};
BenchCollectivesCommands add_bench_collectives_commands(CLI::App& app, BenchCollectivesOptions& bench,
                                                        BenchRankOptions& rank);

}  // namespace quartet::runner
