// End-to-end tests of Tollgate through the official OpenAI and Anthropic clients.
//
// Runs against the stack started by tests/e2e/run.sh (TG_ROUTER_URL, TG_STACK_KEY,
// TG_FAKE_LLM_URL, TG_PG_DSN). Every 200 is recorded with its call id and usage; the last test
// checks that each has exactly one spend_logs row with the right tokens and cost.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';

const ROUTER = process.env.TG_ROUTER_URL;
const KEY = process.env.TG_STACK_KEY;
const FAKE = process.env.TG_FAKE_LLM_URL;
const PG = process.env.TG_PG_DSN;
assert.ok(ROUTER && KEY && FAKE && PG, 'run through tests/e2e/run.sh');

// Prices per token, in nano-USD, by model group (see tests/lib/stack.sh).
const PRICES = {
  'gpt-main': [500, 1500],
  'gpt-fallback': [1000, 2000],
  'claude-main': [3000, 15000],
  'embed-main': [100, 0],
  'gpt-ex': [500, 1500],
  'gpt-ex-fb': [500, 1500],
};

const served = []; // {callId, group, prompt, completion}

const openai = new OpenAI({ baseURL: `${ROUTER}/v1`, apiKey: KEY, maxRetries: 0 });
const anthropic = new Anthropic({ baseURL: ROUTER, apiKey: KEY, maxRetries: 0 });

async function fakeControl(model, body) {
  const r = await fetch(`${FAKE}/_control/models/${model}`, {
    method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body),
  });
  assert.equal(r.status, 200, `fake-llm control for ${model}`);
}

// A stream's headers go out before its usage is known: its cost is checked in spend_logs only.
function record(headers, prompt, completion, streamed = false) {
  const callId = headers.get('x-tollgate-call-id');
  const group = headers.get('x-tollgate-model-group');
  assert.match(callId ?? '', /^[0-9a-f-]{36}$/, 'x-tollgate-call-id');
  assert.ok(group, 'x-tollgate-model-group');
  const [pin, pout] = PRICES[group];
  if (!streamed) {
    const cost = headers.get('x-tollgate-response-cost');
    assert.ok(cost !== null, 'x-tollgate-response-cost');
    assert.ok(Math.abs(Number(cost) - (prompt * pin + completion * pout) / 1e9) < 1e-12,
      `x-tollgate-response-cost ${cost} for ${prompt}/${completion} tokens on ${group}`);
  }
  served.push({ callId, group, prompt, completion });
  return { callId, group };
}

test('chat completions, not streaming', async () => {
  const { data, response } = await openai.chat.completions
    .create({ model: 'gpt-main', messages: [{ role: 'user', content: 'hello' }] })
    .withResponse();
  assert.equal(response.status, 200);
  assert.equal(data.object, 'chat.completion');
  assert.ok(data.choices[0].message.content.length > 0);
  assert.ok(data.usage.prompt_tokens > 0 && data.usage.completion_tokens > 0);
  const { group } = record(response.headers, data.usage.prompt_tokens, data.usage.completion_tokens);
  assert.equal(group, 'gpt-main');
  assert.equal(response.headers.get('x-tollgate-attempts'), '1');
});

test('chat completions, streaming with usage', async () => {
  const { data: stream, response } = await openai.chat.completions
    .create({ model: 'gpt-main', stream: true, stream_options: { include_usage: true },
      messages: [{ role: 'user', content: 'stream please' }] })
    .withResponse();
  let text = '';
  let usage = null;
  for await (const chunk of stream) {
    if (chunk.choices?.[0]?.delta?.content) text += chunk.choices[0].delta.content;
    if (chunk.usage) usage = chunk.usage;
  }
  assert.ok(text.length > 0, 'streamed text');
  assert.ok(usage && usage.completion_tokens > 0, 'usage chunk');
  record(response.headers, usage.prompt_tokens, usage.completion_tokens, true);
});

test('alias resolves to its group', async () => {
  const { data, response } = await openai.chat.completions
    .create({ model: 'alias-main', messages: [{ role: 'user', content: 'via alias' }] })
    .withResponse();
  const { group } = record(response.headers, data.usage.prompt_tokens, data.usage.completion_tokens);
  assert.equal(group, 'gpt-main');
});

test('anthropic messages, not streaming and streaming', async () => {
  const { data, response } = await anthropic.messages
    .create({ model: 'claude-main', max_tokens: 64, messages: [{ role: 'user', content: 'hi' }] })
    .withResponse();
  assert.equal(data.type, 'message');
  assert.ok(data.content[0].text.length > 0);
  record(response.headers, data.usage.input_tokens, data.usage.output_tokens);

  const { data: stream, response: sresp } = await anthropic.messages
    .create({ model: 'claude-main', max_tokens: 64, stream: true,
      messages: [{ role: 'user', content: 'stream' }] })
    .withResponse();
  let input = 0, output = 0, text = '', stopped = false;
  for await (const ev of stream) {
    if (ev.type === 'message_start') input = ev.message.usage.input_tokens;
    if (ev.type === 'content_block_delta') text += ev.delta.text ?? '';
    if (ev.type === 'message_delta') output = ev.usage.output_tokens;
    if (ev.type === 'message_stop') stopped = true;
  }
  assert.ok(stopped && text.length > 0 && output > 0);
  record(sresp.headers, input, output, true);
});

test('anthropic messages to an OpenAI deployment are translated', async () => {
  const { data, response } = await anthropic.messages
    .create({ model: 'gpt-main', max_tokens: 64, system: 'be brief',
      messages: [{ role: 'user', content: 'translated' }] })
    .withResponse();
  assert.equal(data.type, 'message');
  assert.ok(data.usage.input_tokens > 0 && data.usage.output_tokens > 0);
  record(response.headers, data.usage.input_tokens, data.usage.output_tokens);
});

// Tools through translation both ways (fake-llm answers tool calls in each API's shape and
// echoes tool results: tests/fakes/fl_tools.h); each answer is billed like any other.
const WEATHER = { name: 'weather', description: 'current weather',
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } };

test('tools: the openai client through an Anthropic deployment, call and result', async () => {
  const tools = [{ type: 'function', function: WEATHER }];
  const messages = [{ role: 'user', content: 'weather in Paris?' }];
  const { data, response } = await openai.chat.completions
    .create({ model: 'claude-main', messages, tools }).withResponse();
  const call = data.choices[0].message.tool_calls?.[0];
  assert.equal(data.choices[0].finish_reason, 'tool_calls');
  assert.equal(call?.function.name, 'weather');
  assert.deepEqual(JSON.parse(call.function.arguments), { city: 'Paris' });
  record(response.headers, data.usage.prompt_tokens, data.usage.completion_tokens);

  const { data: stream, response: sresp } = await openai.chat.completions
    .create({ model: 'claude-main', messages, tools, stream: true, stream_options: { include_usage: true } })
    .withResponse();
  let args = '', name = '', usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const tc of chunk.choices[0]?.delta?.tool_calls ?? []) {
      name += tc.function?.name ?? '';
      args += tc.function?.arguments ?? '';
    }
  }
  assert.equal(name, 'weather');
  assert.deepEqual(JSON.parse(args), { city: 'Paris' });
  record(sresp.headers, usage.prompt_tokens, usage.completion_tokens, true);

  const { data: fin, response: fresp } = await openai.chat.completions
    .create({ model: 'claude-main', tools, messages: [...messages,
      { role: 'assistant', content: null, tool_calls: data.choices[0].message.tool_calls },
      { role: 'tool', tool_call_id: call.id, content: 'sunny, 22 C' }] }).withResponse();
  assert.equal(fin.choices[0].message.content, 'the tool said: sunny, 22 C');
  record(fresp.headers, fin.usage.prompt_tokens, fin.usage.completion_tokens);
});

test('tools: the anthropic client through an OpenAI deployment, tool_use and tool_result', async () => {
  const tools = [{ name: WEATHER.name, description: WEATHER.description, input_schema: WEATHER.parameters }];
  const messages = [{ role: 'user', content: 'weather in Paris?' }];
  const { data, response } = await anthropic.messages
    .create({ model: 'gpt-main', max_tokens: 64, messages, tools }).withResponse();
  const use = data.content.find((b) => b.type === 'tool_use');
  assert.equal(data.stop_reason, 'tool_use');
  assert.equal(use?.name, 'weather');
  assert.deepEqual(use.input, { city: 'Paris' });
  record(response.headers, data.usage.input_tokens, data.usage.output_tokens);

  const { data: stream, response: sresp } = await anthropic.messages
    .create({ model: 'gpt-main', max_tokens: 64, messages, tools, stream: true }).withResponse();
  let json = '', input = 0, output = 0, stop = null;
  for await (const ev of stream) {
    if (ev.type === 'message_start') input = ev.message.usage.input_tokens;
    if (ev.type === 'content_block_delta' && ev.delta.type === 'input_json_delta') json += ev.delta.partial_json;
    // a translated stream knows its input tokens at the end: message_delta carries them
    if (ev.type === 'message_delta') {
      [output, stop] = [ev.usage.output_tokens, ev.delta.stop_reason];
      input = ev.usage.input_tokens ?? input;
    }
  }
  assert.deepEqual(JSON.parse(json), { city: 'Paris' });
  assert.equal(stop, 'tool_use');
  record(sresp.headers, input, output, true);

  const { data: fin, response: fresp } = await anthropic.messages
    .create({ model: 'gpt-main', max_tokens: 64, tools, messages: [...messages,
      { role: 'assistant', content: data.content },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: 'sunny, 22 C' }] }] })
    .withResponse();
  assert.equal(fin.content.map((b) => b.text ?? '').join(''), 'the tool said: sunny, 22 C');
  assert.equal(fin.stop_reason, 'end_turn');
  record(fresp.headers, fin.usage.input_tokens, fin.usage.output_tokens);
});

test('responses, not streaming and streaming', async () => {
  const { data, response } = await openai.responses
    .create({ model: 'gpt-main', input: 'respond' })
    .withResponse();
  assert.ok(data.output_text.length > 0);
  record(response.headers, data.usage.input_tokens, data.usage.output_tokens);

  const { data: stream, response: sresp } = await openai.responses
    .create({ model: 'gpt-main', input: 'respond streaming', stream: true })
    .withResponse();
  let usage = null;
  for await (const ev of stream) {
    if (ev.type === 'response.completed') usage = ev.response.usage;
  }
  assert.ok(usage && usage.output_tokens > 0, 'response.completed with usage');
  record(sresp.headers, usage.input_tokens, usage.output_tokens, true);
});

test('embeddings', async () => {
  const { data, response } = await openai.embeddings
    .create({ model: 'embed-main', input: ['one', 'two'] })
    .withResponse();
  assert.equal(data.data.length, 2);
  assert.ok(data.data[0].embedding.length > 0);
  record(response.headers, data.usage.prompt_tokens, 0);
});

test('primary failing: retried, then served by the fallback group', async () => {
  await fakeControl('fake-primary-a', { fail_rate: 1.0, status: 503 });
  await fakeControl('fake-primary-b', { fail_rate: 1.0, status: 500 });
  try {
    for (const stream of [false, true]) {
      const { data, response } = await openai.chat.completions
        .create({ model: 'gpt-main', stream, messages: [{ role: 'user', content: 'fallback' }],
          ...(stream ? { stream_options: { include_usage: true } } : {}) })
        .withResponse();
      let usage = data.usage;
      if (stream) for await (const c of data) if (c.usage) usage = c.usage;
      const { group } = record(response.headers, usage.prompt_tokens, usage.completion_tokens,
        stream);
      assert.equal(group, 'gpt-fallback');
      assert.equal(response.headers.get('x-tollgate-fallbacks'), '1');
      assert.ok(Number(response.headers.get('x-tollgate-attempts')) >= 3);
    }
  } finally {
    await fakeControl('fake-primary-a', { fail_rate: 0.0 });
    await fakeControl('fake-primary-b', { fail_rate: 0.0 });
  }
});

test('rate limits: fallback while it has room, then RateLimitError with retry-after', async () => {
  const ask = () => openai.chat.completions
    .create({ model: 'gpt-ex', messages: [{ role: 'user', content: 'limited' }] }).withResponse();
  const first = await ask();
  assert.equal(record(first.response.headers, first.data.usage.prompt_tokens,
    first.data.usage.completion_tokens).group, 'gpt-ex');
  const second = await ask();
  assert.equal(record(second.response.headers, second.data.usage.prompt_tokens,
    second.data.usage.completion_tokens).group, 'gpt-ex-fb');
  await assert.rejects(ask(), (err) => {
    assert.ok(err instanceof OpenAI.RateLimitError, `expected RateLimitError, got ${err}`);
    assert.equal(err.status, 429);
    const ra = Number(err.headers.get('retry-after'));
    assert.ok(ra >= 1 && ra <= 60, `retry-after ${ra}`);
    assert.match(err.message, /gpt-ex/);
    return true;
  });
});

test('errors in the API shape: unknown model, bad key', async () => {
  await assert.rejects(
    openai.chat.completions.create({ model: 'no-such-model', messages: [{ role: 'user', content: 'x' }] }),
    (err) => err instanceof OpenAI.BadRequestError && /no-such-model/.test(err.message));
  const bad = new OpenAI({ baseURL: `${ROUTER}/v1`, apiKey: 'sk-not-a-key', maxRetries: 0 });
  await assert.rejects(
    bad.chat.completions.create({ model: 'gpt-main', messages: [{ role: 'user', content: 'x' }] }),
    (err) => err instanceof OpenAI.AuthenticationError && !err.message.includes('sk-not-a-key'));
  await assert.rejects(
    anthropic.messages.create({ model: 'no-such-model', max_tokens: 8, messages: [{ role: 'user', content: 'x' }] }),
    (err) => err instanceof Anthropic.BadRequestError);
});

test('key API: generate, use, restrict, inspect, delete (master key only)', async () => {
  const MASTER = process.env.TG_STACK_MASTER_KEY;
  const admin = (path, body, key = MASTER) => fetch(`${ROUTER}${path}`, {
    method: body === undefined ? 'GET' : 'POST',
    headers: { authorization: `Bearer ${key}`, 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  // Not the master key: refused, nothing created.
  assert.equal((await admin('/key/generate', { key_alias: 'nope' }, KEY)).status, 401);
  // A bad field is named.
  const bad = await admin('/key/generate', { models: 'gpt-main' });
  assert.equal(bad.status, 400);
  assert.match((await bad.json()).error.message, /models/);

  const gen = await admin('/key/generate', { key_alias: 'e2e', team_id: 'e2e-team',
    models: ['gpt-main', 'gpt-fallback'], metadata: { tags: ['e2e'] } });
  assert.equal(gen.status, 200);
  const created = await gen.json();
  assert.match(created.key, /^sk-/);
  const client = new OpenAI({ baseURL: `${ROUTER}/v1`, apiKey: created.key, maxRetries: 0 });
  const { data, response } = await client.chat.completions
    .create({ model: 'gpt-main', messages: [{ role: 'user', content: 'new key' }] }).withResponse();
  record(response.headers, data.usage.prompt_tokens, data.usage.completion_tokens);
  // The allowlist holds: claude-main is not in the key's models.
  await assert.rejects(
    client.chat.completions.create({ model: 'claude-main', messages: [{ role: 'user', content: 'x' }] }),
    (err) => err.status === 401 || err.status === 403);

  // A raw key in a URL would end up in access logs: refused; the body or the hash instead.
  const inUrl = await admin(`/key/info?key=${encodeURIComponent(created.key)}`);
  assert.equal(inUrl.status, 400);
  assert.ok(!(await inUrl.text()).includes(created.key));
  const byHash = await admin(`/key/info?key=${created.key_hash}`);
  assert.equal(byHash.status, 200);
  const info = await admin('/key/info', { key: created.key });
  assert.equal(info.status, 200);
  const infoText = await info.text();
  assert.ok(!infoText.includes(created.key), '/key/info never returns the key itself');
  assert.match(infoText, /e2e-team/);

  const del = await admin('/key/delete', { keys: [created.key] });
  assert.equal(del.status, 200);
  await assert.rejects(
    client.chat.completions.create({ model: 'gpt-main', messages: [{ role: 'user', content: 'x' }] }),
    (err) => err instanceof OpenAI.AuthenticationError);
});

test('budget: a key over its max_budget is blocked by every router (429 budget_exceeded)', async () => {
  const MASTER = process.env.TG_STACK_MASTER_KEY;
  const gen = await fetch(`${ROUTER}/key/generate`, {
    method: 'POST',
    headers: { authorization: `Bearer ${MASTER}`, 'content-type': 'application/json' },
    // 0.00002 USD: two gpt-main calls (18,000 nano-USD each) cross it.
    body: JSON.stringify({ key_alias: 'budget', max_budget: 0.00002, budget_duration: '1d' }),
  });
  assert.equal(gen.status, 200);
  const { key } = await gen.json();
  const client = new OpenAI({ baseURL: `${ROUTER}/v1`, apiKey: key, maxRetries: 0 });
  for (let i = 0; i < 2; i++) {
    const { data, response } = await client.chat.completions
      .create({ model: 'gpt-main', messages: [{ role: 'user', content: 'spend' }] }).withResponse();
    record(response.headers, data.usage.prompt_tokens, data.usage.completion_tokens);
  }
  // spend-svc commits the spend, crosses 100 %, publishes block:<hash>; the router applies it.
  let blocked = null;
  for (let i = 0; i < 60 && !blocked; i++) {
    try {
      const { data, response } = await client.chat.completions
        .create({ model: 'gpt-main', messages: [{ role: 'user', content: 'more' }] }).withResponse();
      record(response.headers, data.usage.prompt_tokens, data.usage.completion_tokens);
      await new Promise((r) => setTimeout(r, 500));
    } catch (err) {
      blocked = err;
    }
  }
  assert.ok(blocked, 'the key was never blocked');
  assert.ok(blocked instanceof OpenAI.RateLimitError, `expected 429, got ${blocked}`);
  assert.match(JSON.stringify(blocked.error ?? blocked.message), /budget/);
});

function psql(sql) {
  return execFileSync('psql', [PG, '-X', '-q', '-t', '-A', '-F', '\t', '-c', sql], { encoding: 'utf8' }).trim();
}

test('every 200 has exactly one spend_logs row with its tokens and cost', async () => {
  assert.ok(served.length >= 14, `expected the earlier tests to record their calls (${served.length})`);
  const ids = served.map((s) => `'${s.callId}'`).join(',');
  let rows = [];
  for (let i = 0; i < 60; i++) {
    rows = psql(`SELECT call_id, count(*) OVER (PARTITION BY call_id), model_group, prompt_tokens,
                 completion_tokens, cost_nusd FROM spend_logs WHERE call_id IN (${ids})`)
      .split('\n').filter(Boolean);
    if (rows.length >= served.length) break;
    await new Promise((r) => setTimeout(r, 500));
  }
  const byId = new Map(rows.map((l) => { const f = l.split('\t'); return [f[0], f]; }));
  for (const s of served) {
    const f = byId.get(s.callId);
    assert.ok(f, `no spend_logs row for ${s.callId} (${s.group})`);
    assert.equal(f[1], '1', `rows for ${s.callId}`);
    assert.equal(f[2], s.group);
    assert.equal(Number(f[3]), s.prompt, `prompt_tokens of ${s.callId}`);
    assert.equal(Number(f[4]), s.completion, `completion_tokens of ${s.callId}`);
    const [pin, pout] = PRICES[s.group];
    assert.equal(Number(f[5]), s.prompt * pin + s.completion * pout, `cost_nusd of ${s.callId}`);
  }
  assert.equal(rows.length, served.length);
});
