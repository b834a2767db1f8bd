// tpserve's OpenAI-compatible HTTP API driven by the official `openai` npm client (a real client that
// tpserve does not control), against a real `tpserve serve` process:
//   models.list / models.retrieve; completions and chat completions, non-streamed and streamed (the
//   streamed deltas add up to the non-streamed text; usage with stream_options.include_usage);
//   logprobs (completions `logprobs: 2`, chat `logprobs: true, top_logprobs: 2`); stop strings;
//   the SDK's typed errors (401, 404, 400 naming the param); cancellation by closing the stream
//   (the request leaves the running batch and its KV blocks are freed, per the Prometheus metrics);
//   the greedy (and seeded) text equals what `tpserve client` gets over gRPC for the same prompt, and
//   chat equals completions on the conversation rendered by hand with the model's Llama-3 template;
//   the Responses API (responses.create, responses.stream) gives chat's text for the same conversation.
//
// Usage: node openai_client_test.mjs TPSERVE ASSETS [MODEL_DIR]
//   TPSERVE    the tpserve binary
//   ASSETS     the assets folder; the client is ASSETS/npm/openai (scripts/fetch_assets.sh)
//   MODEL_DIR  a `make-model --preset tiny` (llama3) model; made in a temporary folder when absent
// Exits 77 (skipped) when Node.js is older than 18 or the openai package is not there.
// No npm dependencies beyond the openai package itself; nothing is installed.

import assert from 'node:assert/strict';
import { spawn, execFile } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync, writeFileSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, basename, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';

const SKIP = 77;
const [tpserve, assetsArg, modelArg] = process.argv.slice(2);
if (!tpserve || !assetsArg) {
  console.error('usage: node openai_client_test.mjs TPSERVE ASSETS [MODEL_DIR]');
  process.exit(2);
}
const nodeMajor = Number(process.versions.node.split('.')[0]);
if (nodeMajor < 18) {
  console.log(`SKIP: Node.js ${process.versions.node} is older than 18, which the openai client needs`);
  process.exit(SKIP);
}
const sdkDir = join(resolve(assetsArg), 'npm', 'openai');
if (!existsSync(join(sdkDir, 'index.mjs'))) {
  console.log(`SKIP: ${sdkDir} is missing (run scripts/fetch_assets.sh)`);
  process.exit(SKIP);
}
const sdk = await import(pathToFileURL(join(sdkDir, 'index.mjs')).href);
const OpenAI = sdk.default;
const sdkVersion = JSON.parse(readFileSync(join(sdkDir, 'package.json'), 'utf8')).version;
console.log(`openai client ${sdkVersion} on Node.js ${process.versions.node}`);

const work = mkdtempSync(join(tmpdir(), 'tpserve-openai-'));
const MODEL_NAME = 'tpserve-tiny';
const API_KEY = 'openai-client-test-key-0123456789';
const KEY_FILE = join(work, 'api-key');
writeFileSync(KEY_FILE, API_KEY + '\n');

// ---- helpers --------------------------------------------------------------------------------------

function run(cmd, args, { timeoutMs = 60_000 } = {}) {
  return new Promise((resolvePromise, reject) => {
    execFile(cmd, args, { timeout: timeoutMs, maxBuffer: 64 << 20 }, (err, stdout, stderr) => {
      if (err) reject(new Error(`${basename(cmd)} ${args.join(' ')}: ${err.message}\n${stderr}`));
      else resolvePromise({ stdout, stderr });
    });
  });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

let server = null;
let serverLog = '';

// Starts `tpserve serve` and resolves with the addresses of its ready line.
function startServer(model) {
  return new Promise((resolvePromise, reject) => {
    const args = ['serve', '--model', model, '--host', '127.0.0.1', '--port', '0', '--metrics-port', '0',
                  '--http-port', '0', '--served-model-name', MODEL_NAME, '--api-key-file', KEY_FILE,
                  '--threads', '2'];
    server = spawn(tpserve, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    const timer = setTimeout(() => reject(new Error(`no ready line within 60 s:\n${serverLog}`)), 60_000);
    const onData = (data) => {
      serverLog += data.toString();
      const m = serverLog.match(/tpserve ready: grpc (\S+) metrics (\S+) http (\S+)/);
      if (m) {
        clearTimeout(timer);
        resolvePromise({ grpc: m[1], metrics: m[2], http: m[3] });
      }
    };
    server.stdout.on('data', onData);
    server.stderr.on('data', onData);
    server.on('exit', (code, signal) => {
      clearTimeout(timer);
      reject(new Error(`tpserve serve exited (${code ?? signal}) before its ready line:\n${serverLog}`));
    });
  });
}

async function stopServer() {
  if (!server || server.exitCode !== null) return;
  const exited = new Promise((r) => server.once('exit', r));
  server.kill('SIGTERM');
  const timer = setTimeout(() => server.kill('SIGKILL'), 15_000);
  await exited;
  clearTimeout(timer);
}

// The Prometheus metrics as { 'name{labels}': value }.
async function metrics(addr) {
  const response = await fetch(`http://${addr}/metrics`);
  assert.equal(response.status, 200);
  const out = {};
  for (const line of (await response.text()).split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const space = line.lastIndexOf(' ');
    out[line.slice(0, space)] = Number(line.slice(space + 1));
  }
  return out;
}

// What `tpserve client` (gRPC) returns for the prompt.
async function grpcGenerate(grpc, prompt, maxTokens, extra = []) {
  const { stdout } = await run(tpserve, ['client', '--target', grpc, '--api-key-file', KEY_FILE, '--prompt', prompt,
                                         '--max-tokens', String(maxTokens), '--json', ...extra]);
  return JSON.parse(stdout);
}

const GRPC_FINISH = { FINISH_REASON_LENGTH: 'length', FINISH_REASON_STOP: 'stop' };

// Collects a streamed completion: its text, chunks, finish reason, usage, logprobs.
async function collectCompletion(stream) {
  const out = { text: '', chunks: 0, finish: null, usage: null, tokens: [], tokenLogprobs: [], top: [] };
  for await (const chunk of stream) {
    out.chunks++;
    assert.equal(chunk.object, 'text_completion');
    assert.equal(chunk.model, MODEL_NAME);
    assert.match(chunk.id, /^cmpl-/);
    if (chunk.usage) out.usage = chunk.usage;
    for (const choice of chunk.choices) {
      assert.equal(choice.index, 0);
      out.text += choice.text;
      if (choice.finish_reason) out.finish = choice.finish_reason;
      if (choice.logprobs) {
        out.tokens.push(...choice.logprobs.tokens);
        out.tokenLogprobs.push(...choice.logprobs.token_logprobs);
        out.top.push(...choice.logprobs.top_logprobs);
      }
    }
  }
  return out;
}

async function collectChat(stream) {
  const out = { text: '', chunks: 0, finish: null, usage: null, roles: [], content: [] };
  for await (const chunk of stream) {
    out.chunks++;
    assert.equal(chunk.object, 'chat.completion.chunk');
    assert.equal(chunk.model, MODEL_NAME);
    assert.match(chunk.id, /^chatcmpl-/);
    if (chunk.usage) out.usage = chunk.usage;
    for (const choice of chunk.choices) {
      assert.equal(choice.index, 0);
      if (choice.delta.role) out.roles.push(choice.delta.role);
      out.text += choice.delta.content ?? '';
      if (choice.finish_reason) out.finish = choice.finish_reason;
      if (choice.logprobs?.content) out.content.push(...choice.logprobs.content);
    }
  }
  return out;
}

const EPS = 1e-6;

// Completions logprobs of a greedy response with `logprobs: k`.
function checkCompletionLogprobs(lp, text, completionTokens, k) {
  assert.equal(lp.tokens.length, completionTokens);
  assert.equal(lp.token_logprobs.length, completionTokens);
  assert.equal(lp.top_logprobs.length, completionTokens);
  if (lp.text_offset) assert.equal(lp.text_offset.length, completionTokens);
  if (!text.includes('\uFFFD')) assert.equal(lp.tokens.join(''), text);
  for (let i = 0; i < completionTokens; i++) {
    const chosen = lp.token_logprobs[i];
    assert.ok(Number.isFinite(chosen) && chosen <= 0, `token_logprobs[${i}] = ${chosen}`);
    const top = lp.top_logprobs[i];
    const values = Object.values(top);
    // k alternatives; fewer only when two of them decode to the same text (object keys collide).
    assert.ok(values.length >= 1 && values.length <= k, `top_logprobs[${i}] has ${values.length} entries`);
    for (const v of values) assert.ok(Number.isFinite(v) && v <= 0);
    // Greedy: the chosen token is the argmax, so it is at least every alternative, and is one of them.
    for (const [token, v] of Object.entries(top)) {
      assert.ok(chosen >= v - EPS, `token ${i}: chosen ${chosen} < alternative ${JSON.stringify(token)} ${v}`);
    }
    if (!lp.tokens[i].includes('\uFFFD')) {
      assert.ok(lp.tokens[i] in top, `token ${i} ${JSON.stringify(lp.tokens[i])} not among its top_logprobs`);
      assert.ok(Math.abs(top[lp.tokens[i]] - chosen) < 1e-4);
    }
    if (i > 0 && lp.text_offset) assert.ok(lp.text_offset[i] >= lp.text_offset[i - 1]);
  }
}

// Chat logprobs.content of a greedy response with `top_logprobs: k`.
function checkChatLogprobs(content, text, completionTokens, k) {
  assert.equal(content.length, completionTokens);
  const bytes = [];
  for (const [i, entry] of content.entries()) {
    assert.equal(typeof entry.token, 'string');
    assert.ok(Number.isFinite(entry.logprob) && entry.logprob <= 0);
    assert.ok(Array.isArray(entry.bytes) && entry.bytes.length > 0, `content[${i}].bytes`);
    bytes.push(...entry.bytes);
    assert.equal(entry.top_logprobs.length, k);
    for (const alt of entry.top_logprobs) {
      assert.equal(typeof alt.token, 'string');
      assert.ok(Array.isArray(alt.bytes));
      assert.ok(entry.logprob >= alt.logprob - EPS,
                `token ${i}: chosen ${entry.logprob} < alternative ${JSON.stringify(alt.token)} ${alt.logprob}`);
    }
    // Alternatives best first, and the greedy choice is the first.
    for (let j = 1; j < k; j++) assert.ok(entry.top_logprobs[j - 1].logprob >= entry.top_logprobs[j].logprob);
    assert.deepEqual(entry.top_logprobs[0].bytes, entry.bytes);
    assert.ok(Math.abs(entry.top_logprobs[0].logprob - entry.logprob) < 1e-4);
  }
  // The tokens' bytes are the reply's bytes (whatever the UTF-8 boundaries between tokens).
  assert.equal(Buffer.from(bytes).toString('utf8'), text);
}

// Polls the metrics until no request runs and no KV block is held; returns the last sample.
async function waitIdle(addr, withinMs) {
  const deadline = Date.now() + withinMs;
  let m;
  for (;;) {
    m = await metrics(addr);
    if (m.tpserve_num_requests_running === 0 && m.tpserve_num_requests_waiting === 0 &&
        m.tpserve_kv_cache_usage_ratio === 0) {
      return m;
    }
    if (Date.now() > deadline) {
      assert.fail(`not idle ${withinMs} ms later: running ${m.tpserve_num_requests_running}, waiting ` +
                  `${m.tpserve_num_requests_waiting}, kv usage ${m.tpserve_kv_cache_usage_ratio}`);
    }
    await sleep(25);
  }
}

// ---- the checks -----------------------------------------------------------------------------------

const results = [];
async function check(name, fn) {
  const t0 = Date.now();
  try {
    await fn();
    results.push([name, null]);
    console.log(`ok   ${name} (${Date.now() - t0} ms)`);
  } catch (e) {
    results.push([name, e]);
    console.log(`FAIL ${name}\n${e?.stack ?? e}`);
  }
}

let exitCode = 1;
try {
  let model = modelArg;
  if (!model) {
    model = join(work, 'model');
    await run(tpserve, ['make-model', '--preset', 'tiny', '--out', model, '--assets', resolve(assetsArg)]);
  }
  const addr = await startServer(model);
  console.log(`tpserve ready: grpc ${addr.grpc} metrics ${addr.metrics} http ${addr.http}`);
  const client = new OpenAI({ baseURL: `http://${addr.http}/v1`, apiKey: API_KEY, maxRetries: 0, timeout: 60_000 });

  const PROMPTS = ['Hello', 'The capital of France is', 'Grüße aus Köln — 日本語も'];
  const N = 24;
  const greedy = {};  // prompt -> the non-streamed greedy completion

  await check('models.list and models.retrieve name the served model', async () => {
    const page = await client.models.list();
    const ids = [];
    for await (const m of page) ids.push(m.id);
    assert.deepEqual(ids, [MODEL_NAME]);
    assert.equal(page.data[0].object, 'model');
    const card = await client.models.retrieve(MODEL_NAME);
    assert.equal(card.id, MODEL_NAME);
    await assert.rejects(client.models.retrieve('no-such-model'), sdk.NotFoundError);
  });

  await check('completions: greedy non-streamed text equals gRPC for the same prompt', async () => {
    for (const prompt of PROMPTS) {
      const c = await client.completions.create({ model: MODEL_NAME, prompt, max_tokens: N, temperature: 0 });
      assert.equal(c.object, 'text_completion');
      assert.equal(c.model, MODEL_NAME);
      assert.match(c.id, /^cmpl-/);
      assert.equal(typeof c.created, 'number');
      assert.equal(c.choices.length, 1);
      const choice = c.choices[0];
      const ref = await grpcGenerate(addr.grpc, prompt, N);
      assert.equal(choice.text, ref.text, `prompt ${JSON.stringify(prompt)}`);
      assert.equal(choice.finish_reason, GRPC_FINISH[ref.finish_reason]);
      assert.equal(c.usage.prompt_tokens, ref.prompt_tokens);
      assert.equal(c.usage.completion_tokens, ref.completion_tokens);
      assert.equal(c.usage.total_tokens, ref.prompt_tokens + ref.completion_tokens);
      assert.ok(choice.text.length > 0);
      greedy[prompt] = c;
    }
  });

  await check('completions: seeded sampling equals gRPC with the same seed', async () => {
    const prompt = PROMPTS[1];
    const c = await client.completions.create({ model: MODEL_NAME, prompt, max_tokens: N, temperature: 0.8,
                                                top_p: 0.9, seed: 1234 });
    const again = await client.completions.create({ model: MODEL_NAME, prompt, max_tokens: N, temperature: 0.8,
                                                    top_p: 0.9, seed: 1234 });
    assert.equal(again.choices[0].text, c.choices[0].text);
    const ref = await grpcGenerate(addr.grpc, prompt, N, ['--temperature', '0.8', '--top-p', '0.9', '--seed', '1234']);
    assert.equal(c.choices[0].text, ref.text);
    assert.notEqual(c.choices[0].text, greedy[prompt].choices[0].text, 'sampling gave the greedy text');
  });

  await check('completions: streamed deltas add up to the non-streamed text; include_usage', async () => {
    for (const prompt of PROMPTS) {
      const stream = await client.completions.create({ model: MODEL_NAME, prompt, max_tokens: N, temperature: 0,
                                                       stream: true, stream_options: { include_usage: true } });
      const s = await collectCompletion(stream);
      const whole = greedy[prompt];
      assert.equal(s.text, whole.choices[0].text);
      assert.equal(s.finish, whole.choices[0].finish_reason);
      assert.ok(s.chunks >= 3, `only ${s.chunks} chunks`);
      assert.deepEqual(s.usage, whole.usage);
    }
    // Without include_usage no chunk carries usage.
    const s = await collectCompletion(await client.completions.create(
        { model: MODEL_NAME, prompt: PROMPTS[0], max_tokens: 4, temperature: 0, stream: true }));
    assert.equal(s.usage, null);
    assert.equal(s.finish, 'length');
  });

  // Each event is sent as it is made, not held back until the end (SSE through the SDK's fetch,
  // which asks for gzip/deflate as browsers do).
  await check('streaming: events reach the client while the request is generating', async () => {
    const opens = {
      completions: () => client.completions.create(
          { model: MODEL_NAME, prompt: 'Once', max_tokens: 300, temperature: 0, stream: true, ignore_eos: true }),
      chat: () => client.chat.completions.create(
          { model: MODEL_NAME, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 300, temperature: 0,
            stream: true, ignore_eos: true }),
    };
    for (const [name, open] of Object.entries(opens)) {
      const t0 = performance.now();
      const { data: stream, response } = await open().withResponse();
      let first = null, chunks = 0;
      for await (const chunk of stream) {
        if (first === null && chunk.choices.length) first = performance.now() - t0;
        chunks++;
      }
      const last = performance.now() - t0;
      // 300 tokens, but not necessarily 300 chunks: when the client reads slower than the engine
      // writes (a loaded CI machine), the connection sends everything new at once (http_generation.h),
      // so a stream that works can arrive in fewer, larger chunks. A stream held back until the end
      // would arrive in one or two.
      assert.ok(chunks >= 10, `${name}: only ${chunks} chunks for 300 tokens`);
      assert.ok(first < last / 2,
                `${name}: the first event arrived after ${first.toFixed(0)} ms of ${last.toFixed(0)} ms: the ` +
                `stream was held back (Content-Encoding: ${response.headers.get('content-encoding') ?? 'none'})`);
    }
  });

  await check('completions: logprobs 2, non-streamed and streamed', async () => {
    for (const prompt of PROMPTS) {
      const c = await client.completions.create({ model: MODEL_NAME, prompt, max_tokens: N, temperature: 0,
                                                  logprobs: 2 });
      const choice = c.choices[0];
      assert.equal(choice.text, greedy[prompt].choices[0].text);
      checkCompletionLogprobs(choice.logprobs, choice.text, c.usage.completion_tokens, 2);
      const s = await collectCompletion(await client.completions.create(
          { model: MODEL_NAME, prompt, max_tokens: N, temperature: 0, logprobs: 2, stream: true }));
      assert.equal(s.text, choice.text);
      assert.deepEqual(s.tokens, choice.logprobs.tokens);
      assert.deepEqual(s.tokenLogprobs, choice.logprobs.token_logprobs);
      assert.deepEqual(s.top, choice.logprobs.top_logprobs);
    }
    // logprobs: 0 gives the chosen token's logprob only.
    const c = await client.completions.create({ model: MODEL_NAME, prompt: PROMPTS[0], max_tokens: 4,
                                                temperature: 0, logprobs: 0 });
    assert.equal(c.choices[0].logprobs.token_logprobs.length, 4);
    for (const top of c.choices[0].logprobs.top_logprobs) assert.ok(top === null || Object.keys(top).length === 0);
    // Without logprobs: null.
    assert.equal(greedy[PROMPTS[0]].choices[0].logprobs ?? null, null);
  });

  // A stop string taken from the greedy text: the reply is the text before its first occurrence.
  function stopCase(prompt) {
    const text = greedy[prompt].choices[0].text;
    for (let at = 3; at + 2 <= text.length; at++) {
      const stop = text.slice(at, at + 2);
      if (/^[\x21-\x7e]{2}$/.test(stop) && text.indexOf(stop) >= 1) return { stop, expected: text.slice(0, text.indexOf(stop)) };
    }
    throw new Error(`no ASCII stop string in ${JSON.stringify(text)}`);
  }

  await check('completions: stop strings, non-streamed and streamed', async () => {
    let cases = 0;
    for (const prompt of PROMPTS) {
      let sc;
      try { sc = stopCase(prompt); } catch { continue; }
      cases++;
      for (const stop of [sc.stop, ['never-in-this-text', sc.stop]]) {
        const c = await client.completions.create({ model: MODEL_NAME, prompt, max_tokens: N, temperature: 0, stop });
        assert.equal(c.choices[0].text, sc.expected, `stop ${JSON.stringify(stop)}`);
        assert.equal(c.choices[0].finish_reason, 'stop');
        const s = await collectCompletion(await client.completions.create(
            { model: MODEL_NAME, prompt, max_tokens: N, temperature: 0, stop, stream: true }));
        assert.equal(s.text, sc.expected, `streamed, stop ${JSON.stringify(stop)}`);
        assert.equal(s.finish, 'stop');
      }
      // gRPC agrees.
      const ref = await grpcGenerate(addr.grpc, prompt, N, ['--stop', sc.stop]);
      assert.equal(ref.text, sc.expected);
      assert.equal(ref.finish_reason, 'FINISH_REASON_STOP');
    }
    assert.ok(cases >= 1, 'no prompt gave a usable stop string');
    // A stop string that never occurs: the full length.
    const c = await client.completions.create({ model: MODEL_NAME, prompt: PROMPTS[0], max_tokens: N,
                                                temperature: 0, stop: ['never-in-this-text'] });
    assert.equal(c.choices[0].text, greedy[PROMPTS[0]].choices[0].text);
    assert.equal(c.choices[0].finish_reason, 'length');
  });

  // Chat on the tiny preset's Llama-3 template (model/model_maker.cc): bos, then per message
  // '<|start_header_id|>' + role + '<|end_header_id|>\n\n' + content|trim + '<|eot_id|>', then the
  // generation prompt. /v1/completions adds BOS to a text prompt itself, so the hand-rendered
  // text starts after it.
  const template = JSON.parse(readFileSync(join(model, 'tokenizer_config.json'), 'utf8'));
  assert.match(template.chat_template, /<\|start_header_id\|>/, 'the model is not a llama3 tiny preset');
  assert.equal(template.bos_token, '<|begin_of_text|>');
  const render = (messages) =>
    messages.map((m) => `<|start_header_id|>${m.role}<|end_header_id|>\n\n${m.content.trim()}<|eot_id|>`).join('') +
    '<|start_header_id|>assistant<|end_header_id|>\n\n';
  const CONVERSATIONS = [
    [{ role: 'user', content: 'Hi' }],
    [{ role: 'system', content: '  You are terse.\n' }, { role: 'user', content: 'Hello there' },
     { role: 'assistant', content: 'Hi.' }, { role: 'user', content: ' Grüße — what is 2+2? ' }],
  ];
  const chats = [];

  await check('chat: non-streamed and streamed equal completions on the hand-rendered template', async () => {
    for (const messages of CONVERSATIONS) {
      const ref = await client.completions.create({ model: MODEL_NAME, prompt: render(messages), max_tokens: N,
                                                    temperature: 0 });
      const c = await client.chat.completions.create({ model: MODEL_NAME, messages, max_tokens: N, temperature: 0 });
      assert.equal(c.object, 'chat.completion');
      assert.equal(c.model, MODEL_NAME);
      assert.match(c.id, /^chatcmpl-/);
      assert.equal(c.choices.length, 1);
      assert.equal(c.choices[0].message.role, 'assistant');
      assert.equal(c.choices[0].message.content, ref.choices[0].text);
      assert.equal(c.choices[0].finish_reason, ref.choices[0].finish_reason);
      assert.deepEqual(c.usage, ref.usage);
      chats.push(c);
      const s = await collectChat(await client.chat.completions.create(
          { model: MODEL_NAME, messages, max_tokens: N, temperature: 0, stream: true,
            stream_options: { include_usage: true } }));
      assert.equal(s.text, c.choices[0].message.content);
      assert.deepEqual(s.roles, ['assistant']);
      assert.equal(s.finish, c.choices[0].finish_reason);
      assert.deepEqual(s.usage, c.usage);
      // max_completion_tokens is chat's name for max_tokens.
      const m = await client.chat.completions.create({ model: MODEL_NAME, messages, max_completion_tokens: N,
                                                       temperature: 0 });
      assert.equal(m.choices[0].message.content, c.choices[0].message.content);
    }
    // gRPC on the same rendered text (the text prompt path of both front ends).
    const grpcRef = await grpcGenerate(addr.grpc, render(CONVERSATIONS[0]), N);
    assert.equal(chats[0].choices[0].message.content, grpcRef.text);
  });

  await check('chat: logprobs true, top_logprobs 2, non-streamed and streamed', async () => {
    for (const [i, messages] of CONVERSATIONS.entries()) {
      const c = await client.chat.completions.create({ model: MODEL_NAME, messages, max_tokens: N, temperature: 0,
                                                       logprobs: true, top_logprobs: 2 });
      const text = c.choices[0].message.content;
      assert.equal(text, chats[i].choices[0].message.content);
      checkChatLogprobs(c.choices[0].logprobs.content, text, c.usage.completion_tokens, 2);
      const s = await collectChat(await client.chat.completions.create(
          { model: MODEL_NAME, messages, max_tokens: N, temperature: 0, logprobs: true, top_logprobs: 2,
            stream: true }));
      assert.equal(s.text, text);
      assert.deepEqual(s.content, c.choices[0].logprobs.content);
    }
    assert.equal(chats[0].choices[0].logprobs ?? null, null);
  });

  await check('chat: stop strings, non-streamed and streamed', async () => {
    const text = chats[0].choices[0].message.content;
    let stop = null;
    for (let at = 3; at + 2 <= text.length && !stop; at++) {
      const s = text.slice(at, at + 2);
      if (/^[\x21-\x7e]{2}$/.test(s) && text.indexOf(s) >= 1) stop = s;
    }
    assert.ok(stop, `no ASCII stop string in ${JSON.stringify(text)}`);
    const expected = text.slice(0, text.indexOf(stop));
    const c = await client.chat.completions.create({ model: MODEL_NAME, messages: CONVERSATIONS[0], max_tokens: N,
                                                     temperature: 0, stop: [stop] });
    assert.equal(c.choices[0].message.content, expected);
    assert.equal(c.choices[0].finish_reason, 'stop');
    const s = await collectChat(await client.chat.completions.create(
        { model: MODEL_NAME, messages: CONVERSATIONS[0], max_tokens: N, temperature: 0, stop, stream: true }));
    assert.equal(s.text, expected);
    assert.equal(s.finish, 'stop');
  });

  await check('errors surface as the SDK\'s typed errors', async () => {
    const wrongKey = new OpenAI({ baseURL: `http://${addr.http}/v1`, apiKey: 'not-the-key-0123456789',
                                  maxRetries: 0 });
    await assert.rejects(wrongKey.models.list(), (e) => e instanceof sdk.AuthenticationError && e.status === 401);
    await assert.rejects(
        wrongKey.completions.create({ model: MODEL_NAME, prompt: 'Hi', max_tokens: 2 }),
        (e) => e instanceof sdk.AuthenticationError && e.status === 401);
    await assert.rejects(
        wrongKey.chat.completions.create({ model: MODEL_NAME, messages: [{ role: 'user', content: 'Hi' }],
                                           stream: true }),
        (e) => e instanceof sdk.AuthenticationError && e.status === 401);
    await assert.rejects(
        client.completions.create({ model: 'no-such-model', prompt: 'Hi', max_tokens: 2 }),
        (e) => e instanceof sdk.NotFoundError && e.status === 404 && /no-such-model/.test(e.message));
    await assert.rejects(
        client.chat.completions.create({ model: 'no-such-model', messages: [{ role: 'user', content: 'Hi' }] }),
        (e) => e instanceof sdk.NotFoundError && e.status === 404);
    for (const stream of [false, true]) {
      await assert.rejects(
          client.completions.create({ model: MODEL_NAME, prompt: 'Hi', max_tokens: 2, n: 2, stream }),
          (e) => e instanceof sdk.BadRequestError && e.status === 400 && e.param === 'n' && /\bn\b/.test(e.message));
      await assert.rejects(
          client.chat.completions.create({ model: MODEL_NAME, messages: [{ role: 'user', content: 'Hi' }], n: 2,
                                           stream }),
          (e) => e instanceof sdk.BadRequestError && e.status === 400 && e.param === 'n');
    }
    await assert.rejects(
        client.chat.completions.create({ model: MODEL_NAME, messages: [{ role: 'user', content: 'Hi' }],
                                         tools: [{ type: 'function', function: { name: 'f', parameters: {} } }] }),
        (e) => e instanceof sdk.BadRequestError && e.param === 'tools');
    await assert.rejects(
        client.completions.create({ model: MODEL_NAME, prompt: 'Hi', max_tokens: 0 }),
        (e) => e instanceof sdk.BadRequestError && e.param === 'max_tokens');
    // The server is still fine afterwards.
    const c = await client.completions.create({ model: MODEL_NAME, prompt: PROMPTS[0], max_tokens: N, temperature: 0 });
    assert.equal(c.choices[0].text, greedy[PROMPTS[0]].choices[0].text);
  });

  // Cancellation: a long stream (2000 tokens, ignore_eos) is read a little, then closed by the
  // client; the server cancels it: it leaves the running batch, its KV blocks are freed, and it is
  // counted as cancelled rather than finished by length.
  const LONG = { max_tokens: 2000, temperature: 0, stream: true, ignore_eos: true };
  async function cancelCase(open, close) {
    await waitIdle(addr.metrics, 10_000);
    const before = await metrics(addr.metrics);
    const { stream, iterator, response } = await open();
    let chunks = 0;
    for (;;) {
      const { value, done } = await iterator.next();
      assert.ok(!done, 'the stream ended before it was cancelled');
      if (value.choices?.length) chunks++;
      if (chunks >= 5) break;
    }
    const during = await metrics(addr.metrics);
    const lengthSoFar = during['tpserve_requests_total{finish_reason="length"}'] -
                        before['tpserve_requests_total{finish_reason="length"}'];
    assert.equal(lengthSoFar, 0,
                 'the first chunks reached the client only after the whole 2000-token request had finished: ' +
                 'the stream was held back, not sent event by event (response Content-Encoding: ' +
                 `${response.headers.get('content-encoding') ?? 'none'}; the client sent ` +
                 `Accept-Encoding: gzip, deflate as Node's fetch does)`);
    assert.equal(during.tpserve_num_requests_running, 1, 'the long request is not running');
    assert.ok(during.tpserve_kv_cache_usage_ratio > 0, 'the long request holds no KV blocks');
    const t0 = Date.now();
    await close(stream, iterator);
    const after = await waitIdle(addr.metrics, 5_000);
    const ms = Date.now() - t0;
    const cancelled = 'tpserve_requests_total{finish_reason="cancelled"}';
    const length = 'tpserve_requests_total{finish_reason="length"}';
    assert.equal(after[cancelled] - before[cancelled], 1, 'not counted as cancelled');
    assert.equal(after[length] - before[length], 0, 'the request ran to its length instead');
    console.log(`     idle ${ms} ms after closing`);
  }
  const opened = async (promise) => {
    const { data: stream, response } = await promise.withResponse();
    assert.match(response.headers.get('content-type'), /^text\/event-stream/);
    return { stream, response, iterator: stream[Symbol.asyncIterator]() };
  };
  const openCompletion = (extra = {}) => () =>
    opened(client.completions.create({ model: MODEL_NAME, prompt: 'Once upon a time', ...LONG }, extra));
  const openChat = (extra = {}) => () =>
    opened(client.chat.completions.create(
        { model: MODEL_NAME, messages: [{ role: 'user', content: 'Tell me a long story.' }], ...LONG }, extra));

  await check('cancellation: stream.controller.abort() frees the request and its KV blocks', async () => {
    await cancelCase(openCompletion(), async (stream, iterator) => {
      stream.controller.abort();
      // The SDK ends the iteration quietly on its own abort (after what it had already decoded).
      let done = false;
      for (let i = 0; i < 100_000 && !done; i++) done = (await iterator.next()).done;
      assert.ok(done);
    });
  });

  await check('cancellation: an AbortController signal (chat and completions)', async () => {
    let ac = new AbortController();
    await cancelCase(openCompletion({ signal: ac.signal }), async () => ac.abort());
    ac = new AbortController();
    await cancelCase(openChat({ signal: ac.signal }), async () => ac.abort());
  });

  await check('cancellation: breaking out of for await (chat)', async () => {
    await cancelCase(openChat(), async (stream, iterator) => { await iterator.return(); });
  });

  // The Responses API (what the Vercel AI SDK 5+ and LangChain's useResponsesApi call): the same
  // conversation as chat, with the system message as `instructions`, gives chat's text and counts.
  await check('responses: create and stream give chat completions\' text for the same conversation', async () => {
    for (const messages of CONVERSATIONS) {
      const chat = await client.chat.completions.create({ model: MODEL_NAME, messages, max_tokens: N, temperature: 0 });
      const system = messages[0].role === 'system' ? messages[0].content : undefined;
      const input = messages.filter((m) => m.role !== 'system');
      const params = { model: MODEL_NAME, input, instructions: system, max_output_tokens: N, temperature: 0 };
      const r = await client.responses.create(params);
      assert.equal(r.object, 'response');
      assert.match(r.id, /^resp_/);
      assert.equal(r.model, MODEL_NAME);
      assert.equal(r.output_text, chat.choices[0].message.content);
      assert.equal(r.usage.input_tokens, chat.usage.prompt_tokens);
      assert.equal(r.usage.output_tokens, chat.usage.completion_tokens);
      const length = chat.choices[0].finish_reason === 'length';
      assert.equal(r.status, length ? 'incomplete' : 'completed');
      if (length) assert.equal(r.incomplete_details.reason, 'max_output_tokens');

      const stream = client.responses.stream(params);
      const types = [];
      let deltas = '';
      for await (const event of stream) {
        types.push(event.type);
        if (event.type === 'response.output_text.delta') deltas += event.delta;
      }
      const final = await stream.finalResponse();
      assert.equal(deltas, r.output_text);
      // The SDK sets output_text on response.completed only (as OpenAI, an incomplete response ends with
      // response.incomplete); the message it assembled from the events holds the text either way.
      assert.equal(final.output[0].content[0].text, r.output_text);
      assert.deepEqual(types.slice(0, 4), ['response.created', 'response.in_progress', 'response.output_item.added',
                                           'response.content_part.added']);
      assert.equal(types.at(-1), length ? 'response.incomplete' : 'response.completed');
    }
    await assert.rejects(
        client.responses.create({ model: MODEL_NAME, input: [{ type: 'function_call_output', call_id: 'c',
                                                                 output: 'x' }] }),
        (e) => e instanceof sdk.BadRequestError && e.param === 'input[0].type');
    await assert.rejects(client.responses.create({ model: MODEL_NAME, input: 'Hi', previous_response_id: 'resp_1' }),
                         (e) => e instanceof sdk.BadRequestError && e.param === 'previous_response_id');
  });

  await check('after it all: the server is idle and still answers', async () => {
    await waitIdle(addr.metrics, 5_000);
    const c = await client.chat.completions.create({ model: MODEL_NAME, messages: CONVERSATIONS[0], max_tokens: N,
                                                     temperature: 0 });
    assert.equal(c.choices[0].message.content, chats[0].choices[0].message.content);
  });

  const failed = results.filter(([, e]) => e);
  console.log(`openai_client: ${results.length - failed.length} of ${results.length} passed`);
  if (failed.length === 0) {
    console.log('openai_client: all passed');
    exitCode = 0;
  } else {
    for (const [name] of failed) console.log(`failed: ${name}`);
  }
} catch (e) {
  console.log(`FAIL setup\n${e?.stack ?? e}`);
} finally {
  await stopServer();
  if (exitCode !== 0 && serverLog) console.log(`---- tpserve serve log ----\n${serverLog.slice(-8000)}`);
  rmSync(work, { recursive: true, force: true });
}
process.exit(exitCode);
