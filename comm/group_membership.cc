#include "comm/group_membership.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <string_view>

namespace tpserve {
namespace {

Result<int> ParseInt(const std::string& text, const std::string& what) {
  try {
    size_t used = 0;
    const int value = std::stoi(text, &used);
    if (used == text.size()) return value;
  } catch (const std::exception&) {
  }
  return InvalidArgument(what + ": '" + text + "' is not a whole number");
}

// "HOST:PORT", "[v6]:PORT", or HOST alone (the default port).
Status ParseEndpoint(const std::string& text, const std::string& what, std::string* host, int* port) {
  std::string port_text;
  if (!text.empty() && text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string::npos) return InvalidArgument(what + ": '" + text + "' has no closing ']'");
    *host = text.substr(1, close - 1);
    if (close + 1 < text.size()) {
      if (text[close + 1] != ':') return InvalidArgument(what + ": '" + text + "' is not [HOST]:PORT");
      port_text = text.substr(close + 2);
    }
  } else if (std::count(text.begin(), text.end(), ':') > 1) {
    *host = text;  // a bare IPv6 address
  } else {
    const size_t colon = text.rfind(':');
    *host = text.substr(0, colon);
    if (colon != std::string::npos) port_text = text.substr(colon + 1);
  }
  if (host->empty()) return InvalidArgument(what + ": '" + text + "' has no host");
  if (!port_text.empty()) {
    ASSIGN_OR_RETURN(*port, ParseInt(port_text, what + " port"));
    if (*port < 1 || *port > 65535) return InvalidArgument(what + ": port " + port_text + " is not in 1..65535");
  }
  return Status::Ok();
}

const std::string* Find(const std::map<std::string, std::string>& env, const char* name) {
  auto it = env.find(name);
  return it == env.end() || it->second.empty() ? nullptr : &it->second;
}

}  // namespace

std::map<std::string, std::string> MembershipEnvironment() {
  std::map<std::string, std::string> env;
  for (const char* name : {"LWS_LEADER_ADDRESS", "LWS_GROUP_SIZE", "LWS_WORKER_INDEX", "MASTER_ADDR", "MASTER_PORT",
                           "WORLD_SIZE", "RANK", "LOCAL_RANK", "TPSERVE_GROUP_SECRET"}) {
    if (const char* value = std::getenv(name)) env[name] = value;
  }
  return env;
}

namespace {

// The members' shared secret: --group-secret-file's first line, else TPSERVE_GROUP_SECRET, else none.
Result<std::string> ResolveGroupSecret(const MembershipFlags& flags, const std::map<std::string, std::string>& env) {
  std::string secret;
  std::string where = "TPSERVE_GROUP_SECRET";
  if (flags.group_secret_file) {
    where = "--group-secret-file " + *flags.group_secret_file;
    std::ifstream in(*flags.group_secret_file);
    if (!in) return InvalidArgument(where + ": cannot open");
    std::getline(in, secret);
  } else if (const std::string* value = Find(env, "TPSERVE_GROUP_SECRET")) {
    secret = *value;
  } else {
    return std::string();
  }
  while (!secret.empty() && std::isspace(static_cast<unsigned char>(secret.back()))) secret.pop_back();
  if (secret.size() < kMinGroupSecretBytes) {
    return InvalidArgument(where + ": a secret of " + std::to_string(secret.size()) + " bytes; at least " +
                           std::to_string(kMinGroupSecretBytes) + " are needed (e.g. openssl rand -hex 32)");
  }
  return secret;
}

}  // namespace

Result<GroupMembership> ResolveMembership(const MembershipFlags& flags, const std::map<std::string, std::string>& env) {
  GroupMembership m;
  if (flags.nnodes || flags.node_rank || flags.rendezvous) {
    // Flags win, and must come together.
    if (!flags.nnodes || !flags.node_rank || !flags.rendezvous) {
      return InvalidArgument("--nnodes, --node-rank and --rendezvous go together (got " +
                             std::string(flags.nnodes ? "--nnodes " : "") + (flags.node_rank ? "--node-rank " : "") +
                             (flags.rendezvous ? "--rendezvous" : "") + ")");
    }
    m.members = *flags.nnodes;
    m.member = *flags.node_rank;
    RETURN_IF_ERROR(ParseEndpoint(*flags.rendezvous, "--rendezvous", &m.host, &m.port));
    m.source = "flags (--nnodes " + std::to_string(m.members) + " --node-rank " + std::to_string(m.member) +
               " --rendezvous " + *flags.rendezvous + ")";
  } else if (const std::string* leader = Find(env, "LWS_LEADER_ADDRESS")) {
    // Kubernetes LeaderWorkerSet: one process per node; LWS gives no port.
    const std::string* size = Find(env, "LWS_GROUP_SIZE");
    const std::string* index = Find(env, "LWS_WORKER_INDEX");
    if (size == nullptr || index == nullptr) {
      return InvalidArgument("LWS_LEADER_ADDRESS is set but LWS_GROUP_SIZE or LWS_WORKER_INDEX is not");
    }
    ASSIGN_OR_RETURN(m.members, ParseInt(*size, "LWS_GROUP_SIZE"));
    ASSIGN_OR_RETURN(m.member, ParseInt(*index, "LWS_WORKER_INDEX"));
    RETURN_IF_ERROR(ParseEndpoint(*leader, "LWS_LEADER_ADDRESS", &m.host, &m.port));
    m.source = "LeaderWorkerSet environment (LWS_LEADER_ADDRESS=" + *leader + ", LWS_GROUP_SIZE=" + *size +
               ", LWS_WORKER_INDEX=" + *index + ")";
  } else if (const std::string* master = Find(env, "MASTER_ADDR")) {
    // torchrun: one process per rank; LOCAL_RANK is its GPU.
    const std::string* world = Find(env, "WORLD_SIZE");
    const std::string* rank = Find(env, "RANK");
    if (world == nullptr || rank == nullptr) return InvalidArgument("MASTER_ADDR is set but WORLD_SIZE or RANK is not");
    ASSIGN_OR_RETURN(m.members, ParseInt(*world, "WORLD_SIZE"));
    ASSIGN_OR_RETURN(m.member, ParseInt(*rank, "RANK"));
    RETURN_IF_ERROR(ParseEndpoint(*master, "MASTER_ADDR", &m.host, &m.port));
    if (const std::string* port = Find(env, "MASTER_PORT")) {
      ASSIGN_OR_RETURN(m.port, ParseInt(*port, "MASTER_PORT"));
    }
    if (const std::string* local = Find(env, "LOCAL_RANK")) {
      ASSIGN_OR_RETURN(m.local_device, ParseInt(*local, "LOCAL_RANK"));
    }
    m.source = "torchrun environment (MASTER_ADDR=" + *master + ", WORLD_SIZE=" + *world + ", RANK=" + *rank + ")";
    if (flags.tp && *flags.tp != m.members) {
      return InvalidArgument("--tp " + std::to_string(*flags.tp) + " under torchrun must equal WORLD_SIZE " +
                             std::to_string(m.members) + " (one process per rank)");
    }
  } else {
    m.source = "single process";
  }
  if (m.members < 1) return InvalidArgument("the group needs at least 1 member, got " + std::to_string(m.members));
  if (m.member < 0 || m.member >= m.members) {
    return InvalidArgument("member " + std::to_string(m.member) + " is outside 0.." + std::to_string(m.members - 1) +
                           " (" + m.source + ")");
  }
  if (m.port < 1 || m.port > 65535) return InvalidArgument("rendezvous port " + std::to_string(m.port) + " is not in 1..65535");
  m.tp = flags.tp.value_or(m.members);
  if (m.tp < 1 || m.tp % m.members != 0) {
    return InvalidArgument("--tp " + std::to_string(m.tp) + " must divide among " + std::to_string(m.members) +
                           " members (each runs tp / members ranks)");
  }
  m.local_ranks = m.tp / m.members;
  m.first_rank = m.member * m.local_ranks;
  ASSIGN_OR_RETURN(m.secret, ResolveGroupSecret(flags, env));
  return m;
}

}  // namespace tpserve
