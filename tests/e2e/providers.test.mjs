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
