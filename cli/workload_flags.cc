// The flag sets two commands share, registered once so that they stay the same: loadgen's
// workload flags (loadgen and plan simulate), the serving loop's scheduler flags (serve and
// plan simulate) and the multi-process group's (serve, generate, bench-decode and bench-comm).
#include "cli/commands.h"

namespace tpserve {

void AddWorkloadFlags(CLI::App* cmd, WorkloadOptions* o) {
  cmd->add_option("--concurrency", o->concurrency, "Closed loop: requests in flight")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--rate", o->rates,
                  "Open loop: requests per second (Poisson arrivals); a list (1,2,4) runs one load level each")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  cmd->add_option("--burstiness", o->burstiness, "Gamma shape of the gaps: 1 Poisson, < 1 burstier")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--requests", o->requests, "Requests to send")->check(CLI::PositiveNumber)->capture_default_str();
  cmd->add_option("--prompt-tokens", o->prompt_tokens, "Random prompt length: N or LOW-HIGH")->capture_default_str();
  cmd->add_option("--output-tokens", o->output_tokens, "Output length: N or LOW-HIGH (exact, via ignore_eos)")
      ->capture_default_str();
  cmd->add_option("--dataset", o->dataset, "JSONL file of {\"prompt\": \"...\"} lines instead of random prompts");
  cmd->add_option("--shared-prefix-tokens", o->shared_prefix_tokens,
                  "Random prompts start with a prefix of N tokens that every request of its group shares (a "
                  "system prompt), then their own --prompt-tokens")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--prefix-groups", o->prefix_groups,
                  "Groups of --shared-prefix-tokens: request i uses prefix i mod G")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--seed", o->seed, "Seed of prompts, lengths and arrivals")->capture_default_str();
  cmd->add_option("--slo-ttft-ms", o->slo.ttft_ms, "Goodput: time-to-first-token limit")->check(CLI::NonNegativeNumber);
  cmd->add_option("--slo-tpot-ms", o->slo.tpot_ms, "Goodput: time-per-output-token limit")->check(CLI::NonNegativeNumber);
}

void AddSchedulerFlags(CLI::App* cmd, ServingOptions* o) {
  cmd->add_option("--max-model-len", o->max_model_len,
                  "Prompt + max_tokens limit (0: the model's max_position_embeddings)")
      ->capture_default_str();
  cmd->add_option("--max-batch-size", o->scheduler.max_batch_size, "Running sequences")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--max-wait-us", o->max_wait_us, "How long an idle engine waits for more requests before a partial batch")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--max-batched-tokens", o->scheduler.max_batched_tokens,
                  "Token budget per step (prompts are prefilled in chunks)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option("--max-queue", o->max_queue, "Waiting requests before RESOURCE_EXHAUSTED")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  cmd->add_option_function<std::string>(
         "--prefix-caching", [o](const std::string& on) { o->scheduler.prefix_caching = on == "on"; },
         "Automatic prefix caching: a prompt's leading full KV blocks that an earlier request computed are "
         "reused, not recomputed (outputs are bitwise the same either way)")
      ->check(CLI::IsMember({"on", "off"}))
      ->default_str("on");
}

void AddGroupFlags(CLI::App* cmd, MembershipFlags* membership, std::string* bind_address, int* group_timeout_ms) {
  cmd->add_option_function<int>("--nnodes", [membership](int n) { membership->nnodes = n; },
                                "Processes in the group (multi-process; also from LeaderWorkerSet or torchrun variables)");
  cmd->add_option_function<int>("--node-rank", [membership](int i) { membership->node_rank = i; },
                                "This process's index in the group (0: the leader)");
  cmd->add_option_function<std::string>("--rendezvous", [membership](const std::string& s) { membership->rendezvous = s; },
                                        "HOST:PORT where the leader meets the group");
  cmd->add_option_function<std::string>(
      "--group-secret-file", [membership](const std::string& f) { membership->group_secret_file = f; },
      "A file whose first line every member shares (16+ bytes): members prove it at the rendezvous, which refuses "
      "anyone else (else TPSERVE_GROUP_SECRET; without either, anyone who reaches the port can join)");
  cmd->add_option("--bind-address", *bind_address, "This process's address for its Gloo connections")
      ->capture_default_str();
  cmd->add_option("--group-timeout-ms", *group_timeout_ms,
                  "Joining the group and every collective between processes; a peer slower than this fails the step")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
}

}  // namespace tpserve
