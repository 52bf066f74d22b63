// The cloud providers through Tollgate with the official OpenAI and Anthropic clients: Azure
// OpenAI (api-key, and Entra ID), the Gemini API, Vertex AI (Gemini and Claude), Amazon Bedrock
// (SigV4, and STS), each behind tests/fakes/cloud_fake.py, which checks their authentication
// as the services do. For every provider: chat completions and Anthropic messages, each
// streaming and not, with the answer's text and usage as the client library reads them;
// embeddings where the provider has them; the Responses API on those without one (through the
// chat translation).
//
// Runs through tests/e2e/providers_run.sh (TG_ROUTER_URL, TG_STACK_KEY).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';

const ROUTER = process.env.TG_ROUTER_URL;
const KEY = process.env.TG_STACK_KEY;
assert.ok(ROUTER && KEY, 'run through tests/e2e/providers_run.sh');

const openai = new OpenAI({ baseURL: `${ROUTER}/v1`, apiKey: KEY, maxRetries: 0 });
const anthropic = new Anthropic({ baseURL: ROUTER, apiKey: KEY, maxRetries: 0 });

// group -> [the fake's answer, prompt tokens, completion tokens]
const GROUPS = {
  'azure-key': ['hello from the cloud fake', 11, 5],
  'azure-entra': ['hello from the cloud fake', 11, 5],
  'gemini': ['hello from gemini', 13, 8],
  'vertex-gemini': ['hello from gemini', 13, 8],
  'vertex-claude': ['hello from claude on vertex', 17, 5],
  'bedrock': ['hello from bedrock', 21, 6],
  'bedrock-sts': ['hello from bedrock', 21, 6],
};

for (const [group, [text, prompt, completion]] of Object.entries(GROUPS)) {
  test(`${group}: chat completions (openai client)`, async () => {
    const r = await openai.chat.completions.create({
      model: group, messages: [{ role: 'system', content: 'be brief' }, { role: 'user', content: 'hi' }],
    });
    assert.equal(r.choices[0].message.content, text);
    assert.equal(r.choices[0].finish_reason, 'stop');
    assert.equal(r.usage.prompt_tokens, prompt);
    assert.equal(r.usage.completion_tokens, completion);
  });

  test(`${group}: chat completions streaming with usage (openai client)`, async () => {
    const stream = await openai.chat.completions.create({
      model: group, stream: true, stream_options: { include_usage: true },
      messages: [{ role: 'user', content: 'hi' }],
    });
    let got = '';
    let finish = null;
    let usage = null;
    for await (const chunk of stream) {
      if (chunk.usage) usage = chunk.usage;
      for (const c of chunk.choices) {
        got += c.delta?.content ?? '';
        finish = c.finish_reason ?? finish;
      }
    }
    assert.equal(got, text);
    assert.equal(finish, 'stop');
    assert.deepEqual([usage?.prompt_tokens, usage?.completion_tokens], [prompt, completion]);
  });

  test(`${group}: messages (anthropic client)`, async () => {
    const m = await anthropic.messages.create({
      model: group, max_tokens: 64, system: 'be brief', messages: [{ role: 'user', content: 'hi' }],
    });
    assert.equal(m.type, 'message');
    assert.equal(m.content[0].type, 'text');
    assert.equal(m.content[0].text, text);
    assert.equal(m.stop_reason, 'end_turn');
    assert.equal(m.usage.output_tokens, completion);
  });

  test(`${group}: messages streaming (anthropic client)`, async () => {
    const stream = anthropic.messages.stream({
      model: group, max_tokens: 64, messages: [{ role: 'user', content: 'hi' }],
    });
    const final = await stream.finalMessage();
    assert.equal(final.content.map((b) => b.text).join(''), text);
    assert.equal(final.stop_reason, 'end_turn');
    assert.equal(final.usage.output_tokens, completion);
  });
}

// The client asks for base64 by default and decodes it: the vectors must come back exact.
for (const [group, n, vec] of [['azure-embed', 2, [0.5, 0.25]], ['gemini-embed', 2, [0.5, 0.25, 0.125]],
  ['vertex-embed', 2, [0.5, 0.25]], ['bedrock-embed', 1, [0.5, 0.25, 0.125]]]) {
  test(`${group}: embeddings (openai client, its default base64 and floats)`, async () => {
    const input = n === 1 ? 'hello' : ['hello', 'world'];
    const r = await openai.embeddings.create({ model: group, input });
    assert.equal(r.data.length, n);
    r.data.forEach((d, i) => {
      assert.equal(d.index, i);
      assert.deepEqual(Array.from(d.embedding), vec);
    });
    const f = await openai.embeddings.create({ model: group, input, encoding_format: 'float' });
    assert.deepEqual(f.data[0].embedding, vec);
  });
}

// The Responses API on providers that have none: Tollgate translates it through chat.
for (const group of ['gemini', 'vertex-gemini', 'vertex-claude', 'bedrock', 'bedrock-sts']) {
  const [text, prompt, completion] = GROUPS[group];

  test(`${group}: responses through the chat translation (openai client)`, async () => {
    const r = await openai.responses.create({ model: group, instructions: 'be brief', input: 'hi' });
    assert.equal(r.object, 'response');
    assert.equal(r.status, 'completed');
    assert.equal(r.output_text, text);
    assert.deepEqual([r.usage.input_tokens, r.usage.output_tokens], [prompt, completion]);

    const stream = await openai.responses.create({ model: group, input: 'hi', stream: true });
    let got = '';
    let done = null;
    let seq = -1;
    for await (const ev of stream) {
      assert.equal(ev.sequence_number, seq + 1, 'sequence numbers without a gap');
      seq = ev.sequence_number;
      if (ev.type === 'response.output_text.delta') got += ev.delta;
      if (ev.type === 'response.completed') done = ev.response;
    }
    assert.equal(got, text);
    assert.equal(done?.status, 'completed');
    assert.deepEqual([done.usage.input_tokens, done.usage.output_tokens], [prompt, completion]);
  });
}

test('a tool call comes back as tool_calls (gemini, bedrock)', async () => {
  for (const group of ['gemini', 'bedrock']) {
    const r = await openai.chat.completions.create({
      model: group, messages: [{ role: 'user', content: 'weather in Paris?' }],
      tools: [{ type: 'function', function: { name: 'weather', parameters: { type: 'object', properties: { city: { type: 'string' } } } } }],
    });
    assert.equal(r.choices[0].finish_reason, 'tool_calls', group);
    assert.equal(r.choices[0].message.tool_calls[0].function.name, 'weather', group);
    assert.deepEqual(JSON.parse(r.choices[0].message.tool_calls[0].function.arguments), { city: 'Paris' }, group);
  }
});

test('errors reach the clients in their shape (throttling: RateLimitError)', async () => {
  await assert.rejects(
    openai.chat.completions.create({ model: 'bedrock-429', messages: [{ role: 'user', content: 'x' }] }),
    (err) => err instanceof OpenAI.RateLimitError);
  await assert.rejects(
    anthropic.messages.create({ model: 'bedrock-429', max_tokens: 8, messages: [{ role: 'user', content: 'x' }] }),
    (err) => err instanceof Anthropic.RateLimitError);
});

// ---- Tools through translation. The fakes call a declared tool in their provider's own
// shape (tests/fakes/cloud_fake.py: the first tool, the one tool_choice names, or the first two
// when the prompt carries "[parallel]"; arguments from the schema: strings "Paris", integers 3,
// booleans true) and answer text echoing the tool results they get ("the tool said: ..."); they
// refuse with 400 a request whose tools, calls or results are not in their API's shape, so a
// translation defect fails here.
const WEATHER_FN = {
  name: 'weather', description: 'current weather',
  parameters: { type: 'object', properties: { city: { type: 'string' }, days: { type: 'integer' } }, required: ['city'] },
};
const CLOCK_FN = {
  name: 'clock', description: 'local time',
  parameters: { type: 'object', properties: { zone: { type: 'string' }, exact: { type: 'boolean' } } },
};
const WEATHER_ARGS = { city: 'Paris', days: 3 };
const CLOCK_ARGS = { zone: 'Paris', exact: true };
const OA_TOOLS = [WEATHER_FN, CLOCK_FN].map((f) => ({ type: 'function', function: f }));
const AN_TOOLS = [WEATHER_FN, CLOCK_FN].map((f) => ({ name: f.name, description: f.description, input_schema: f.parameters }));
// fl-anthropic and fl-openai: fake-llm's Anthropic messages and OpenAI chat endpoints (same
// behaviour, tests/fakes/fl_tools.h).
const TOOL_GROUPS = ['azure-key', 'gemini', 'vertex-gemini', 'vertex-claude', 'bedrock', 'fl-anthropic', 'fl-openai'];

function assertChatUsage(u, group) {
  assert.ok(u && u.prompt_tokens > 0 && u.completion_tokens > 0, `${group}: usage ${JSON.stringify(u)}`);
}

// A chat stream's tool calls put together from their deltas, by index.
async function collectChatStream(stream) {
  const calls = [];
  let text = '';
  let finish = null;
  let usage = null;
  let argDeltas = 0;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      text += c.delta?.content ?? '';
      finish = c.finish_reason ?? finish;
      for (const tc of c.delta?.tool_calls ?? []) {
        const cur = (calls[tc.index] ??= { id: '', name: '', args: '' });
        if (tc.id) cur.id = tc.id;
        if (tc.function?.name) cur.name += tc.function.name;
        if (tc.function?.arguments) {
          cur.args += tc.function.arguments;
          argDeltas++;
        }
      }
    }
  }
  return { calls, text, finish, usage, argDeltas };
}

for (const group of TOOL_GROUPS) {
  test(`${group}: a tool call and its result, round trip (openai client)`, async () => {
    const messages = [{ role: 'user', content: 'weather in Paris?' }];
    const r = await openai.chat.completions.create({ model: group, messages, tools: OA_TOOLS });
    const msg = r.choices[0].message;
    assert.equal(r.choices[0].finish_reason, 'tool_calls');
    assert.equal(msg.tool_calls.length, 1);
    const call = msg.tool_calls[0];
    assert.equal(call.type, 'function');
    assert.ok(call.id, 'the call has an id');
    assert.equal(call.function.name, 'weather');
    assert.deepEqual(JSON.parse(call.function.arguments), WEATHER_ARGS);
    assertChatUsage(r.usage, group);

    const followUp = [...messages, { role: 'assistant', content: msg.content ?? null, tool_calls: msg.tool_calls },
      { role: 'tool', tool_call_id: call.id, content: 'sunny, 22 C' }];
    const f = await openai.chat.completions.create({ model: group, messages: followUp, tools: OA_TOOLS });
    assert.equal(f.choices[0].finish_reason, 'stop');
    assert.equal(f.choices[0].message.content, 'the tool said: sunny, 22 C');
    assertChatUsage(f.usage, group);

    const s = await collectChatStream(await openai.chat.completions.create({
      model: group, messages: followUp, tools: OA_TOOLS, stream: true, stream_options: { include_usage: true },
    }));
    assert.equal(s.text, 'the tool said: sunny, 22 C');
    assert.equal(s.finish, 'stop');
    assertChatUsage(s.usage, group);
  });

  test(`${group}: a streamed tool call, its argument deltas put together (openai client)`, async () => {
    const s = await collectChatStream(await openai.chat.completions.create({
      model: group, messages: [{ role: 'user', content: 'weather in Paris?' }], tools: OA_TOOLS,
      stream: true, stream_options: { include_usage: true },
    }));
    assert.equal(s.finish, 'tool_calls');
    assert.equal(s.calls.length, 1);
    assert.ok(s.calls[0].id, 'the call has an id');
    assert.equal(s.calls[0].name, 'weather');
    assert.deepEqual(JSON.parse(s.calls[0].args), WEATHER_ARGS);
    assertChatUsage(s.usage, group);
  });

  test(`${group}: parallel tool calls and both results (openai client)`, async () => {
    const messages = [{ role: 'user', content: 'weather and time in Paris [parallel]' }];
    const r = await openai.chat.completions.create({ model: group, messages, tools: OA_TOOLS });
    const calls = r.choices[0].message.tool_calls;
    assert.equal(r.choices[0].finish_reason, 'tool_calls');
    assert.deepEqual(calls.map((c) => c.function.name), ['weather', 'clock']);
    assert.deepEqual(calls.map((c) => JSON.parse(c.function.arguments)), [WEATHER_ARGS, CLOCK_ARGS]);
    assert.notEqual(calls[0].id, calls[1].id);

    const s = await collectChatStream(await openai.chat.completions.create({
      model: group, messages, tools: OA_TOOLS, stream: true, stream_options: { include_usage: true },
    }));
    assert.equal(s.finish, 'tool_calls');
    assert.deepEqual(s.calls.map((c) => [c.name, JSON.parse(c.args)]), [['weather', WEATHER_ARGS], ['clock', CLOCK_ARGS]]);
    assertChatUsage(s.usage, group);

    const f = await openai.chat.completions.create({
      model: group, tools: OA_TOOLS, messages: [...messages,
        { role: 'assistant', content: null, tool_calls: calls },
        { role: 'tool', tool_call_id: calls[0].id, content: 'sunny' },
        { role: 'tool', tool_call_id: calls[1].id, content: '14:05' }],
    });
    assert.equal(f.choices[0].message.content, 'the tool said: sunny; 14:05');
  });

  test(`${group}: tool_choice naming a tool forces it (openai client)`, async () => {
    const r = await openai.chat.completions.create({
      model: group, messages: [{ role: 'user', content: 'weather in Paris?' }], tools: OA_TOOLS,
      tool_choice: { type: 'function', function: { name: 'clock' } },
    });
    const calls = r.choices[0].message.tool_calls;
    assert.equal(calls.length, 1);
    assert.equal(calls[0].function.name, 'clock');
    assert.deepEqual(JSON.parse(calls[0].function.arguments), CLOCK_ARGS);
  });

  test(`${group}: tool_use and tool_result, round trip, streaming and not (anthropic client)`, async () => {
    const messages = [{ role: 'user', content: 'weather in Paris?' }];
    const m = await anthropic.messages.create({ model: group, max_tokens: 64, messages, tools: AN_TOOLS });
    assert.equal(m.stop_reason, 'tool_use');
    const uses = m.content.filter((b) => b.type === 'tool_use');
    assert.equal(uses.length, 1);
    assert.ok(uses[0].id, 'the tool_use has an id');
    assert.equal(uses[0].name, 'weather');
    assert.deepEqual(uses[0].input, WEATHER_ARGS);
    assert.ok(m.usage.input_tokens > 0 && m.usage.output_tokens > 0, JSON.stringify(m.usage));

    let deltas = '';
    const stream = anthropic.messages.stream({ model: group, max_tokens: 64, messages, tools: AN_TOOLS });
    stream.on('inputJson', (piece) => { deltas += piece; });
    const sm = await stream.finalMessage();
    assert.equal(sm.stop_reason, 'tool_use');
    const su = sm.content.filter((b) => b.type === 'tool_use');
    assert.deepEqual(su.map((b) => [b.name, b.input]), [['weather', WEATHER_ARGS]]);
    assert.deepEqual(JSON.parse(deltas), WEATHER_ARGS);
    assert.ok(sm.usage.output_tokens > 0, JSON.stringify(sm.usage));

    const followUp = [...messages, { role: 'assistant', content: m.content },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: uses[0].id, content: 'sunny, 22 C' }] }];
    const f = await anthropic.messages.create({ model: group, max_tokens: 64, messages: followUp, tools: AN_TOOLS });
    assert.equal(f.stop_reason, 'end_turn');
    assert.equal(f.content.map((b) => b.text ?? '').join(''), 'the tool said: sunny, 22 C');
    assert.ok(f.usage.output_tokens > 0, JSON.stringify(f.usage));

    const fs = await anthropic.messages.stream({ model: group, max_tokens: 64, messages: followUp, tools: AN_TOOLS }).finalMessage();
    assert.equal(fs.content.map((b) => b.text ?? '').join(''), 'the tool said: sunny, 22 C');
    assert.equal(fs.stop_reason, 'end_turn');
  });

  test(`${group}: parallel tool_use, and tool_choice naming a tool (anthropic client)`, async () => {
    const messages = [{ role: 'user', content: 'weather and time in Paris [parallel]' }];
    const m = await anthropic.messages.create({ model: group, max_tokens: 64, messages, tools: AN_TOOLS });
    const uses = m.content.filter((b) => b.type === 'tool_use');
    assert.deepEqual(uses.map((b) => [b.name, b.input]), [['weather', WEATHER_ARGS], ['clock', CLOCK_ARGS]]);

    const sm = await anthropic.messages.stream({ model: group, max_tokens: 64, messages, tools: AN_TOOLS }).finalMessage();
    assert.deepEqual(sm.content.filter((b) => b.type === 'tool_use').map((b) => [b.name, b.input]),
      [['weather', WEATHER_ARGS], ['clock', CLOCK_ARGS]]);

    const f = await anthropic.messages.create({
      model: group, max_tokens: 64, tools: AN_TOOLS, messages: [...messages, { role: 'assistant', content: m.content },
        { role: 'user', content: uses.map((u, i) => ({ type: 'tool_result', tool_use_id: u.id, content: ['sunny', '14:05'][i] })) }],
    });
    assert.equal(f.content.map((b) => b.text ?? '').join(''), 'the tool said: sunny; 14:05');

    const forced = await anthropic.messages.create({
      model: group, max_tokens: 64, messages: [{ role: 'user', content: 'weather in Paris?' }], tools: AN_TOOLS,
      tool_choice: { type: 'tool', name: 'clock' },
    });
    assert.deepEqual(forced.content.filter((b) => b.type === 'tool_use').map((b) => [b.name, b.input]), [['clock', CLOCK_ARGS]]);
  });
}

for (const group of TOOL_GROUPS) {
  test(`${group}: a tool without parameters, tool_choice required, results as parts and JSON (openai client)`, async () => {
    const ping = { type: 'function', function: { name: 'ping', description: 'no arguments' } };
    const r = await openai.chat.completions.create({
      model: group, messages: [{ role: 'user', content: 'ping?' }], tools: [ping, ...OA_TOOLS], tool_choice: 'required',
    });
    const calls = r.choices[0].message.tool_calls;
    assert.deepEqual(calls.map((c) => [c.function.name, JSON.parse(c.function.arguments)]), [['ping', {}]]);

    const f = await openai.chat.completions.create({
      model: group, tools: [ping, ...OA_TOOLS], messages: [{ role: 'user', content: 'ping?' },
        { role: 'assistant', content: 'checking', tool_calls: calls },
        { role: 'tool', tool_call_id: calls[0].id, content: [{ type: 'text', text: 'pong' }] }],
    });
    assert.equal(f.choices[0].message.content, 'the tool said: pong');

    const j = await openai.chat.completions.create({
      model: group, tools: [ping, ...OA_TOOLS], messages: [{ role: 'user', content: 'ping?' },
        { role: 'assistant', content: null, tool_calls: calls },
        { role: 'tool', tool_call_id: calls[0].id, content: '{"sky":"clear","temp":22}' }],
    });
    assert.match(j.choices[0].message.content, /^the tool said: .*clear/);
  });

  test(`${group}: text beside tool_use, tool_result as blocks, tool_choice any (anthropic client)`, async () => {
    const m = await anthropic.messages.create({
      model: group, max_tokens: 64, messages: [{ role: 'user', content: 'weather?' }], tools: AN_TOOLS,
      tool_choice: { type: 'any' },
    });
    const use = m.content.find((b) => b.type === 'tool_use');
    assert.equal(use.name, 'weather');
    const f = await anthropic.messages.create({
      model: group, max_tokens: 64, tools: AN_TOOLS, system: 'be brief', messages: [
        { role: 'user', content: [{ type: 'text', text: 'weather?' }] },
        { role: 'assistant', content: [{ type: 'text', text: 'let me look' }, use] },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, is_error: false,
          content: [{ type: 'text', text: 'sunny' }] }] }],
    });
    assert.equal(f.content.map((b) => b.text ?? '').join(''), 'the tool said: sunny');
  });
}

// The Responses API's function tools through the chat translation.
const RS_TOOLS = [WEATHER_FN, CLOCK_FN].map((f) => ({ type: 'function', name: f.name, description: f.description, parameters: f.parameters, strict: false }));
for (const group of ['gemini', 'vertex-gemini', 'vertex-claude', 'bedrock', 'fl-anthropic']) {
  test(`${group}: responses with function tools, call and output, streaming and not (openai client)`, async () => {
    const input = [{ role: 'user', content: 'weather and time in Paris [parallel]' }];
    const r = await openai.responses.create({ model: group, input, tools: RS_TOOLS });
    const calls = r.output.filter((o) => o.type === 'function_call');
    assert.deepEqual(calls.map((c) => [c.name, JSON.parse(c.arguments)]), [['weather', WEATHER_ARGS], ['clock', CLOCK_ARGS]]);
    assert.ok(calls.every((c) => c.call_id), 'each call has a call_id');
    assert.ok(r.usage.input_tokens > 0 && r.usage.output_tokens > 0, JSON.stringify(r.usage));

    const stream = await openai.responses.create({ model: group, input, tools: RS_TOOLS, stream: true });
    const args = {};
    let done = null;
    let seq = -1;
    for await (const ev of stream) {
      assert.equal(ev.sequence_number, seq + 1, 'sequence numbers without a gap');
      seq = ev.sequence_number;
      if (ev.type === 'response.function_call_arguments.delta') args[ev.item_id] = (args[ev.item_id] ?? '') + ev.delta;
      if (ev.type === 'response.completed') done = ev.response;
    }
    const scalls = done.output.filter((o) => o.type === 'function_call');
    assert.deepEqual(scalls.map((c) => [c.name, JSON.parse(c.arguments)]), [['weather', WEATHER_ARGS], ['clock', CLOCK_ARGS]]);
    assert.deepEqual(scalls.map((c) => JSON.parse(args[c.id])), [WEATHER_ARGS, CLOCK_ARGS]);
    assert.ok(done.usage.output_tokens > 0);

    const f = await openai.responses.create({
      model: group, tools: RS_TOOLS, input: [...input,
        ...calls.map((c) => ({ type: 'function_call', call_id: c.call_id, name: c.name, arguments: c.arguments })),
        { type: 'function_call_output', call_id: calls[0].call_id, output: 'sunny' },
        { type: 'function_call_output', call_id: calls[1].call_id, output: '14:05' }],
    });
    assert.equal(f.output_text, 'the tool said: sunny; 14:05');
  });
}

// Text before the calls (the fakes say "Let me check." first when the prompt carries
// "[preamble]"): the calls keep their own indexes from 0 in the chat stream, and the text block
// comes first in the Anthropic answer.
for (const group of TOOL_GROUPS) {
  test(`${group}: text before parallel tool calls, streaming and not, both clients`, async () => {
    const messages = [{ role: 'user', content: 'weather and time [parallel] [preamble]' }];
    const r = await openai.chat.completions.create({ model: group, messages, tools: OA_TOOLS });
    const msg = r.choices[0].message;
    assert.equal(msg.content, 'Let me check.');
    assert.deepEqual(msg.tool_calls.map((c) => [c.function.name, JSON.parse(c.function.arguments)]),
      [['weather', WEATHER_ARGS], ['clock', CLOCK_ARGS]]);
    const s = await collectChatStream(await openai.chat.completions.create({
      model: group, messages, tools: OA_TOOLS, stream: true, stream_options: { include_usage: true },
    }));
    assert.equal(s.text, 'Let me check.');
    assert.equal(s.finish, 'tool_calls');
    assert.deepEqual(s.calls.map((c) => [c.name, JSON.parse(c.args)]), [['weather', WEATHER_ARGS], ['clock', CLOCK_ARGS]]);
    assert.ok(s.calls.every((c) => c.id), 'each streamed call has an id');
    const f = await openai.chat.completions.create({
      model: group, tools: OA_TOOLS, messages: [...messages, { role: 'assistant', content: msg.content, tool_calls: msg.tool_calls },
        ...msg.tool_calls.map((c, i) => ({ role: 'tool', tool_call_id: c.id, content: ['rain', 'noon'][i] }))],
    });
    assert.equal(f.choices[0].message.content, 'the tool said: rain; noon');

    const m = await anthropic.messages.create({ model: group, max_tokens: 64, messages, tools: AN_TOOLS });
    const shape = (content) => content.map((b) => (b.type === 'text' ? ['text', b.text] : [b.type, b.name, b.input]));
    const want = [['text', 'Let me check.'], ['tool_use', 'weather', WEATHER_ARGS], ['tool_use', 'clock', CLOCK_ARGS]];
    assert.deepEqual(shape(m.content), want);
    assert.equal(m.stop_reason, 'tool_use');
    const sm = await anthropic.messages.stream({ model: group, max_tokens: 64, messages, tools: AN_TOOLS }).finalMessage();
    assert.deepEqual(shape(sm.content), want);
    assert.equal(sm.stop_reason, 'tool_use');
    const uses = m.content.filter((b) => b.type === 'tool_use');
    const fm = await anthropic.messages.create({
      model: group, max_tokens: 64, tools: AN_TOOLS, messages: [...messages, { role: 'assistant', content: m.content },
        { role: 'user', content: uses.map((u, i) => ({ type: 'tool_result', tool_use_id: u.id, content: ['rain', 'noon'][i] })) }],
    });
    assert.equal(fm.content.map((b) => b.text ?? '').join(''), 'the tool said: rain; noon');
  });
}

// A call without arguments, streamed: Claude streams its input as one empty delta and Bedrock
// as none; the OpenAI client still gets arguments that parse as {}.
for (const group of TOOL_GROUPS) {
  test(`${group}: a streamed call without arguments (openai and anthropic clients)`, async () => {
    const ping = { name: 'ping', description: 'no arguments', parameters: { type: 'object', properties: {} } };
    const s = await collectChatStream(await openai.chat.completions.create({
      model: group, messages: [{ role: 'user', content: 'ping?' }], tools: [{ type: 'function', function: ping }],
      stream: true, stream_options: { include_usage: true },
    }));
    assert.equal(s.finish, 'tool_calls');
    assert.equal(s.calls.length, 1);
    assert.equal(s.calls[0].name, 'ping');
    assert.deepEqual(JSON.parse(s.calls[0].args), {}, `arguments ${JSON.stringify(s.calls[0].args)}`);

    const sm = await anthropic.messages.stream({
      model: group, max_tokens: 64, messages: [{ role: 'user', content: 'ping?' }],
      tools: [{ name: ping.name, description: ping.description, input_schema: ping.parameters }],
    }).finalMessage();
    assert.deepEqual(sm.content.map((b) => [b.type, b.name, b.input]), [['tool_use', 'ping', {}]]);
  });
}

// Parallel calls turned off by the client reach the providers that can say so (OpenAI
// parallel_tool_calls: false <-> Anthropic disable_parallel_tool_use): one call, not two.
for (const group of ['azure-key', 'vertex-claude', 'fl-anthropic', 'fl-openai']) {
  test(`${group}: parallel calls turned off (openai and anthropic clients)`, async () => {
    const messages = [{ role: 'user', content: 'weather and time in Paris [parallel]' }];
    const r = await openai.chat.completions.create({ model: group, messages, tools: OA_TOOLS, parallel_tool_calls: false });
    assert.deepEqual(r.choices[0].message.tool_calls.map((c) => c.function.name), ['weather']);
    const m = await anthropic.messages.create({
      model: group, max_tokens: 64, messages, tools: AN_TOOLS, tool_choice: { type: 'auto', disable_parallel_tool_use: true },
    });
    assert.deepEqual(m.content.filter((b) => b.type === 'tool_use').map((b) => b.name), ['weather']);
  });
}

// The Responses API: a streamed function call without arguments has arguments "{}".
for (const group of ['gemini', 'vertex-claude', 'bedrock', 'fl-anthropic']) {
  test(`${group}: responses, a streamed function call without arguments (openai client)`, async () => {
    const stream = await openai.responses.create({
      model: group, input: 'ping?', stream: true,
      tools: [{ type: 'function', name: 'ping', parameters: { type: 'object', properties: {} }, strict: false }],
    });
    let done = null;
    for await (const ev of stream) if (ev.type === 'response.completed') done = ev.response;
    const calls = done.output.filter((o) => o.type === 'function_call');
    assert.deepEqual(calls.map((c) => [c.name, JSON.parse(c.arguments)]), [['ping', {}]]);
  });
}

// A user's words right after the tool results (OpenAI: a user message after the tool messages;
// Anthropic: a text block beside the tool_result blocks): providers whose turns must alternate
// get one user turn. The answer is the echo where the results share the last turn, a new call
// where they do not; either way the request is one the provider accepts.
for (const group of TOOL_GROUPS) {
  test(`${group}: the user's words right after tool results (openai and anthropic clients)`, async () => {
    const first = await openai.chat.completions.create({
      model: group, messages: [{ role: 'user', content: 'weather?' }], tools: OA_TOOLS,
    });
    const calls = first.choices[0].message.tool_calls;
    const r = await openai.chat.completions.create({
      model: group, tools: OA_TOOLS, messages: [{ role: 'user', content: 'weather?' },
        { role: 'assistant', content: null, tool_calls: calls },
        { role: 'tool', tool_call_id: calls[0].id, content: 'sunny' },
        { role: 'user', content: 'and the time?' }],
    });
    const c = r.choices[0];
    assert.ok(c.message.content === 'the tool said: sunny' ||
      (c.finish_reason === 'tool_calls' && c.message.tool_calls[0].function.name === 'weather'),
    JSON.stringify(c));

    const m = await anthropic.messages.create({ model: group, max_tokens: 64, messages: [{ role: 'user', content: 'weather?' }], tools: AN_TOOLS });
    const use = m.content.find((b) => b.type === 'tool_use');
    const f = await anthropic.messages.create({
      model: group, max_tokens: 64, tools: AN_TOOLS, messages: [{ role: 'user', content: 'weather?' },
        { role: 'assistant', content: m.content },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: 'sunny' }, { type: 'text', text: 'and the time?' }] }],
    });
    const text = f.content.map((b) => b.text ?? '').join('');
    assert.ok(text === 'the tool said: sunny' ||
      (f.stop_reason === 'tool_use' && f.content.some((b) => b.type === 'tool_use')), JSON.stringify(f.content));

    // then the conversation goes on: an answer in text, a new question, a new call
    const g = await openai.chat.completions.create({
      model: group, tools: OA_TOOLS, messages: [{ role: 'user', content: 'weather?' },
        { role: 'assistant', content: null, tool_calls: calls },
        { role: 'tool', tool_call_id: calls[0].id, content: 'sunny' },
        { role: 'assistant', content: 'It is sunny.' },
        { role: 'user', content: 'and the time? [parallel]' }],
    });
    assert.deepEqual(g.choices[0].message.tool_calls.map((tc) => tc.function.name), ['weather', 'clock']);
  });
}

// A schema as OpenAI's strict mode writes it (additionalProperties false, optional fields as
// ["integer", "null"]) with a parameter named like a keyword ("strict"): every parameter reaches
// the provider, in a schema the provider accepts (Gemini's Schema has no additionalProperties
// and no list of types).
for (const group of TOOL_GROUPS) {
  test(`${group}: a strict-mode schema with a parameter named "strict" (openai and anthropic clients)`, async () => {
    const parameters = {
      type: 'object', additionalProperties: false, required: ['city', 'strict', 'days', 'opts'],
      properties: {
        city: { type: 'string', description: 'a city' },
        strict: { type: 'boolean', description: 'exact match only' },
        days: { type: ['integer', 'null'] },
        opts: { type: 'object', additionalProperties: false, properties: { unit: { type: 'string', enum: ['C', 'F'] } }, required: ['unit'] },
      },
    };
    const want = { city: 'Paris', strict: true, days: 3, opts: {} };
    const r = await openai.chat.completions.create({
      model: group, messages: [{ role: 'user', content: 'weather?' }],
      tools: [{ type: 'function', function: { name: 'weather', parameters, strict: true } }],
    });
    assert.deepEqual(JSON.parse(r.choices[0].message.tool_calls[0].function.arguments), want);
    const m = await anthropic.messages.create({
      model: group, max_tokens: 64, messages: [{ role: 'user', content: 'weather?' }],
      tools: [{ name: 'weather', input_schema: parameters }],
    });
    assert.deepEqual(m.content.find((b) => b.type === 'tool_use').input, want);
  });
}

// The Responses API with text before parallel calls: a message item then two function_call
// items, numbered in order in the stream, the same as the non-streamed answer.
for (const group of ['gemini', 'vertex-gemini', 'vertex-claude', 'bedrock', 'fl-anthropic']) {
  test(`${group}: responses with text before parallel function calls, streaming and not`, async () => {
    const input = 'weather and time [parallel] [preamble]';
    const r = await openai.responses.create({ model: group, input, tools: RS_TOOLS });
    const shape = (output) => output.map((o) => (o.type === 'function_call' ? [o.type, o.name, JSON.parse(o.arguments)]
      : [o.type, o.content.map((c) => c.text).join('')]));
    const want = [['message', 'Let me check.'], ['function_call', 'weather', WEATHER_ARGS], ['function_call', 'clock', CLOCK_ARGS]];
    assert.deepEqual(shape(r.output), want);

    const stream = await openai.responses.create({ model: group, input, tools: RS_TOOLS, stream: true });
    const added = [];
    const done = [];
    let completed = null;
    for await (const ev of stream) {
      if (ev.type === 'response.output_item.added') added.push([ev.output_index, ev.item.type]);
      if (ev.type === 'response.output_item.done') done[ev.output_index] = ev.item;
      if (ev.type === 'response.completed') completed = ev.response;
    }
    assert.deepEqual(added, [[0, 'message'], [1, 'function_call'], [2, 'function_call']]);
    assert.deepEqual(shape(done), want);
    assert.deepEqual(shape(completed.output), want);
  });
}

// OpenAI-compatible servers that stream every call whole in one chunk (vLLM, Groq, ...; the
// fakes do on "[oneshot]"): the Anthropic client still gets one tool_use block per call.
for (const group of ['azure-key', 'fl-openai']) {
  test(`${group}: calls streamed whole in one chunk (anthropic and openai clients)`, async () => {
    const messages = [{ role: 'user', content: 'weather and time [parallel] [oneshot] [preamble]' }];
    const sm = await anthropic.messages.stream({ model: group, max_tokens: 64, messages, tools: AN_TOOLS }).finalMessage();
    assert.deepEqual(sm.content.map((b) => (b.type === 'text' ? ['text', b.text] : [b.type, b.name, b.input])),
      [['text', 'Let me check.'], ['tool_use', 'weather', WEATHER_ARGS], ['tool_use', 'clock', CLOCK_ARGS]]);
    assert.equal(sm.stop_reason, 'tool_use');
    const s = await collectChatStream(await openai.chat.completions.create({
      model: group, messages, tools: OA_TOOLS, stream: true, stream_options: { include_usage: true },
    }));
    assert.deepEqual(s.calls.map((c) => [c.name, JSON.parse(c.args)]), [['weather', WEATHER_ARGS], ['clock', CLOCK_ARGS]]);
  });
}

// The last turn of a tool round without tools (OpenAI clients often leave them out once the
// results are in) or with tool_choice "none": the history's calls and results still reach the
// provider in a request it accepts (Bedrock and Anthropic want the tools declared when the
// history holds tool blocks).
for (const group of TOOL_GROUPS) {
  test(`${group}: the results' turn without tools, and with tool_choice none (openai client)`, async () => {
    const first = await openai.chat.completions.create({
      model: group, messages: [{ role: 'user', content: 'weather?' }], tools: OA_TOOLS,
    });
    const calls = first.choices[0].message.tool_calls;
    const messages = [{ role: 'user', content: 'weather?' },
      { role: 'assistant', content: null, tool_calls: calls },
      { role: 'tool', tool_call_id: calls[0].id, content: 'sunny' }];
    const bare = await openai.chat.completions.create({ model: group, messages });
    assert.equal(bare.choices[0].message.content, 'the tool said: sunny');
    const none = await openai.chat.completions.create({ model: group, messages, tools: OA_TOOLS, tool_choice: 'none' });
    assert.equal(none.choices[0].message.content, 'the tool said: sunny');
  });
}

for (const group of TOOL_GROUPS) {
  test(`${group}: tool_choice none, first turn and results' turn (anthropic client)`, async () => {
    const m = await anthropic.messages.create({
      model: group, max_tokens: 64, messages: [{ role: 'user', content: 'weather?' }], tools: AN_TOOLS, tool_choice: { type: 'none' },
    });
    assert.equal(m.stop_reason, 'end_turn');
    assert.ok(!m.content.some((b) => b.type === 'tool_use'), JSON.stringify(m.content));

    const first = await anthropic.messages.create({ model: group, max_tokens: 64, messages: [{ role: 'user', content: 'weather?' }], tools: AN_TOOLS });
    const use = first.content.find((b) => b.type === 'tool_use');
    const f = await anthropic.messages.create({
      model: group, max_tokens: 64, tools: AN_TOOLS, tool_choice: { type: 'none' }, messages: [{ role: 'user', content: 'weather?' },
        { role: 'assistant', content: first.content },
        { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: 'sunny' }] }],
    });
    assert.equal(f.content.map((b) => b.text ?? '').join(''), 'the tool said: sunny');
  });
}
