#pragma once

// A pipeline stage's links to its neighbours: the connection its upstream neighbour opens
// to it (through the stage's own server, published in the coordinator's store), the one
// it opens to its downstream neighbour, an outbox per connection that sends on a
// thread of its own, so that a stage never blocks on a send while its neighbour blocks on
// one the other way (1F1B's steady state sends both ways at once), and an inbox per
// connection that reads a step's activations or gradients as they arrive.

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "engine/tensor.h"
#include "trainers/regime.h"
#include "trainers/split/split.h"
#include "transport/connection.h"
#include "transport/messages.h"

namespace quartet::trainers::pipeline {

// The only connection a stage accepts: its upstream neighbour's. The server's handler
// thread parks here while the stage uses the connection, until release().
class Inbound {
 public:
  Inbound(int64_t stage, int64_t stages, std::string link) : stage_(stage), stages_(stages), link_(std::move(link)) {}
  // The server's handler: checks the hello's role, welcomes, parks.
  void handle(transport::Connection& conn, const transport::Hello& hello);
  // The upstream connection, or null when none came within `timeout`.
  transport::Connection* wait(transport::Deadline timeout);
  void release();

 private:
  int64_t stage_, stages_;
  std::string link_;
  std::mutex mutex_;
  std::condition_variable cv_;
  transport::Connection* conn_ = nullptr;
  bool released_ = false;
};

// Opens the connection to stage `to`, waiting for its address up to `timeout`.
// requires ctx.coordinator
std::unique_ptr<transport::Connection> connect_downstream(const RoleContext& ctx, int64_t to, double timeout_s);

// The hello role of stage s.
std::string hello_role(int64_t stage);

// Sends on a thread of its own, in the order posted; each send's bytes and frames are
// filed under its kind in `traffic` (sent bytes only: the stage receives on this
// connection from another thread). A failed send calls `on_error` (the stage closes its
// links, so that whatever it waits on ends) and is rethrown by the next post or flush.
class Outbox {
 public:
  using Send = std::function<void(transport::Connection&)>;
  Outbox(transport::Connection& conn, split::Traffic& traffic, std::function<void()> on_error);
  ~Outbox();
  Outbox(const Outbox&) = delete;
  Outbox& operator=(const Outbox&) = delete;

  void post(const char* kind, Send send);
  // Waits until everything posted has gone.
  void flush();

 private:
  void loop();
  void rethrow_locked();

  transport::Connection& conn_;
  split::Traffic& traffic_;
  std::function<void()> on_error_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::pair<const char*, Send>> queue_;
  bool busy_ = false;
  bool stopping_ = false;
  std::exception_ptr error_;
  std::thread thread_;
};

// Receives on a thread of its own, ahead of need: each expect(n) lets it read n more
// messages with `receive` as soon as they arrive, so that a neighbour's send completes
// while this stage computes rather than when it asks (a micro-batch of megabytes read
// only at its forward lands milliseconds late and stretches the bubble). take() hands
// them over in order. Received bytes and frames are filed under `kind`; this thread alone
// receives on the connection. A failed receive calls `on_error` and is rethrown by take().
class Inbox {
 public:
  using Receive = std::function<engine::TensorList(transport::Connection&)>;
  Inbox(transport::Connection& conn, split::Traffic& traffic, const char* kind, Receive receive,
        std::function<void()> on_error);
  // Stops reading; a receive in progress ends when the connection closes (the caller
  // closes it first on a failure; after a clean run none is in progress).
  ~Inbox();
  Inbox(const Inbox&) = delete;
  Inbox& operator=(const Inbox&) = delete;

  void expect(int64_t n);
  engine::TensorList take();

 private:
  void loop();

  transport::Connection& conn_;
  split::Traffic& traffic_;
  const char* kind_;
  Receive receive_;
  std::function<void()> on_error_;
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<engine::TensorList> ready_;
  int64_t wanted_ = 0;  // messages expected and not yet read
  bool stopping_ = false;
  std::exception_ptr error_;
  std::thread thread_;
};

// Runs `fn` (receives on `conn`, this thread alone receiving) and files the bytes and
// frames it received under `kind`.
template <class Fn>
auto count_received(transport::Connection& conn, split::Traffic& traffic, const char* kind, Fn&& fn) {
  const transport::Counters before = conn.counters();
  auto result = fn();
  const transport::Counters after = conn.counters();
  traffic.add(kind, {0, before.bytes_received, 0, before.messages_received},
              {0, after.bytes_received, 0, after.messages_received});
  return result;
}

}  // namespace quartet::trainers::pipeline
