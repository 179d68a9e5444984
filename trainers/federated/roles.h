#pragma once

// The federated regime's two kinds of role and where its server publishes itself.

#include <cstdint>
#include <string>

#include "trainers/federated/federated.h"
#include "trainers/regime.h"

namespace quartet::trainers::federated {

// The coordinator keys where the server publishes its address and token.
std::string server_address_key(const std::string& arm);
std::string server_token_key(const std::string& arm);

// requires ctx.coordinator (rendezvous), ctx.workload
void run_server(const RoleContext& ctx, const Settings& settings);
// Hosts clients c with c % processes == index, one connection each; trains one at a time.
void run_pool(const RoleContext& ctx, const Settings& settings, int64_t index);

}  // namespace quartet::trainers::federated
