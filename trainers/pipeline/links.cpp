#include "trainers/pipeline/links.h"

#include <chrono>

#include "trainers/pipeline/pipeline.h"
#include "transport/coordinator.h"

namespace quartet::trainers::pipeline {

using namespace std::chrono_literals;

std::string hello_role(int64_t stage) { return "pipeline/stage" + std::to_string(stage); }

void Inbound::handle(transport::Connection& conn, const transport::Hello& hello) {
  if (hello.role != hello_role(stage_ - 1)) {
    transport::send_error_and_close(conn, "pipeline stage " + std::to_string(stage_) + ": expected " +
                                              hello_role(stage_ - 1) + ", got " + hello.role, 5s);
    return;
  }
  {
    std::lock_guard lock(mutex_);
    if (conn_ || released_) {
      transport::send_error_and_close(conn, "pipeline stage " + std::to_string(stage_) + ": already connected", 5s);
      return;
    }
  }
  conn.set_link(transport::link_profile(link_));
  transport::send_message(conn, transport::MessageType::welcome,
                          transport::Welcome{static_cast<int32_t>(stage_), static_cast<int32_t>(stages_), "{}"}, 30s);
  std::unique_lock lock(mutex_);
  conn_ = &conn;
  cv_.notify_all();
  cv_.wait(lock, [&] { return released_; });
}

transport::Connection* Inbound::wait(transport::Deadline timeout) {
  std::unique_lock lock(mutex_);
  cv_.wait_for(lock, timeout, [&] { return conn_ != nullptr; });
  return conn_;
}

void Inbound::release() {
  std::lock_guard lock(mutex_);
  released_ = true;
  cv_.notify_all();
}

std::unique_ptr<transport::Connection> connect_downstream(const RoleContext& ctx, int64_t to, double timeout_s) {
  const auto wait = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::duration<double>(timeout_s));
  const auto give_up = std::chrono::steady_clock::now() + wait;
  for (;;) {
    std::string address, token;
    try {
      address = ctx.coordinator->kv_wait(stage_address_key(ctx.arm, to), wait);
      token = ctx.coordinator->kv_wait(stage_token_key(ctx.arm, to), 1min);
    } catch (const std::exception& e) {
      throw std::runtime_error("stage " + std::to_string(to) + " did not publish its address within " +
                               std::to_string(timeout_s) + " s: " + e.what());
    }
    try {
      const auto [host, port] = transport::parse_host_port(address);
      std::unique_ptr<transport::Connection> conn =
          transport::Connection::connect(host, port, 30s, ctx.coordinator->options().tls.get());
      conn->set_link(transport::link_profile(ctx.link));
      transport::send_message(*conn, transport::MessageType::hello, transport::Hello{token, hello_role(to - 1)}, 30s);
      transport::receive_message<transport::Welcome>(*conn, transport::MessageType::welcome, 60s);
      return conn;
    } catch (const std::exception& e) {
      if (std::chrono::steady_clock::now() > give_up)
        throw std::runtime_error("could not join stage " + std::to_string(to) + " at " + address + ": " + e.what());
      std::this_thread::sleep_for(200ms);
    }
  }
}

Outbox::Outbox(transport::Connection& conn, split::Traffic& traffic, std::function<void()> on_error)
    : conn_(conn), traffic_(traffic), on_error_(std::move(on_error)), thread_([this] { loop(); }) {}

Outbox::~Outbox() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Outbox::rethrow_locked() {
  if (error_) std::rethrow_exception(error_);
}

void Outbox::post(const char* kind, Send send) {
  std::lock_guard lock(mutex_);
  rethrow_locked();
  queue_.emplace_back(kind, std::move(send));
  cv_.notify_all();
}

void Outbox::flush() {
  std::unique_lock lock(mutex_);
  cv_.wait(lock, [&] { return error_ || (queue_.empty() && !busy_); });
  rethrow_locked();
}

void Outbox::loop() {
  std::unique_lock lock(mutex_);
  for (;;) {
    cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
    if (queue_.empty() || error_) return;  // stopping
    auto [kind, send] = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    lock.unlock();
    std::exception_ptr error;
    try {
      const transport::Counters before = conn_.counters();
      send(conn_);
      const transport::Counters after = conn_.counters();
      traffic_.add(kind, {before.bytes_sent, 0, before.messages_sent, 0}, {after.bytes_sent, 0, after.messages_sent, 0});
    } catch (...) {
      error = std::current_exception();
    }
    if (error) on_error_();
    lock.lock();
    busy_ = false;
    if (error) {
      error_ = error;
      queue_.clear();
    }
    cv_.notify_all();
  }
}

Inbox::Inbox(transport::Connection& conn, split::Traffic& traffic, const char* kind, Receive receive,
             std::function<void()> on_error)
    : conn_(conn), traffic_(traffic), kind_(kind), receive_(std::move(receive)), on_error_(std::move(on_error)),
      thread_([this] { loop(); }) {}

Inbox::~Inbox() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Inbox::expect(int64_t n) {
  std::lock_guard lock(mutex_);
  wanted_ += n;
  cv_.notify_all();
}

engine::TensorList Inbox::take() {
  std::unique_lock lock(mutex_);
  cv_.wait(lock, [&] { return error_ || !ready_.empty(); });
  if (ready_.empty()) std::rethrow_exception(error_);
  engine::TensorList next = std::move(ready_.front());
  ready_.pop_front();
  return next;
}

void Inbox::loop() {
  std::unique_lock lock(mutex_);
  for (;;) {
    cv_.wait(lock, [&] { return stopping_ || wanted_ > 0; });
    if (stopping_) return;
    lock.unlock();
    std::exception_ptr error;
    engine::TensorList got;
    try {
      got = count_received(conn_, traffic_, kind_, [&] { return receive_(conn_); });
    } catch (...) {
      error = std::current_exception();
    }
    if (error) on_error_();
    lock.lock();
    if (error) {
      error_ = error;
      cv_.notify_all();
      return;
    }
    wanted_ -= 1;
    ready_.push_back(std::move(got));
    cv_.notify_all();
  }
}

}  // namespace quartet::trainers::pipeline
