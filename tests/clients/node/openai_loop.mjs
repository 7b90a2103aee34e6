// A multi-turn tool loop on the official `openai` Node SDK, as users write it.
//
// Usage: node openai_loop.mjs <base-url> <models> <mode> [max-steps]
//   (or TOOLCALL_BASE_URL, TOOLCALL_MODEL, TOOLCALL_MODE, TOOLCALL_MAX_STEPS)
// <models> is one model name or several separated by commas (one loop each, in order).
// Modes:
//   create            chat.completions.create, not streaming, hand-written loop
//   create-stream     chat.completions.create({stream: true}), chunks merged by `index`
//   stream-helper     chat.completions.stream(...).finalChatCompletion(), hand-written loop
//   stream-usage      the same with stream_options: {include_usage: true}
//   run-tools         chat.completions.runTools (the SDK's own tool loop)
//   run-tools-stream  the same, streaming
// Prints one JSON object per model, one per line:
//   {final_text, steps, usage: [total tokens, each time a response reported usage],
//    executed: [{id, name, arguments}], error: null | {name, message, status?}}
import OpenAI from 'openai';

import { finish, parseArgs, TOOL_SPECS, userPrompt } from './common.mjs';

const { baseURL, model: models, mode, maxSteps } = parseArgs();
const client = new OpenAI({ baseURL, apiKey: 'sk-test', maxRetries: 0, timeout: 20_000 });

const tools = TOOL_SPECS.map(spec => ({
  type: 'function',
  function: { name: spec.name, description: spec.description, parameters: spec.parameters },
}));

// Hand-written accumulation keyed by `index`, concatenating the string fields it receives.
async function accumulate(stream, usage) {
  let content = '';
  const calls = new Map();
  for await (const chunk of stream) {
    if (chunk.usage) usage.push(chunk.usage.total_tokens);
    for (const choice of chunk.choices ?? []) {
      const delta = choice.delta ?? {};
      if (delta.content) content += delta.content;
      for (const tc of delta.tool_calls ?? []) {
        const slot = calls.get(tc.index) ?? { id: '', name: '', arguments: '' };
        slot.id += tc.id ?? '';
        slot.name += tc.function?.name ?? '';
        slot.arguments += tc.function?.arguments ?? '';
        calls.set(tc.index, slot);
      }
    }
  }
  const toolCalls = [...calls.entries()]
    .sort(([a], [b]) => a - b)
    .map(([, c]) => ({
      id: c.id,
      type: 'function',
      function: { name: c.name, arguments: c.arguments },
    }));
  return { role: 'assistant', content, tool_calls: toolCalls.length ? toolCalls : undefined };
}

async function nextMessage(model, messages, usage) {
  const body = { model, messages, tools };
  const completed = completion => {
    if (completion.usage) usage.push(completion.usage.total_tokens);
    return completion.choices[0].message;
  };
  if (mode === 'create') {
    return completed(await client.chat.completions.create(body));
  }
  if (mode === 'create-stream') {
    return accumulate(await client.chat.completions.create({ ...body, stream: true }), usage);
  }
  if (mode === 'stream-helper' || mode === 'stream-usage') {
    const options = mode === 'stream-usage' ? { stream_options: { include_usage: true } } : {};
    const stream = client.chat.completions.stream({ ...body, ...options });
    return completed(await stream.finalChatCompletion());
  }
  throw new Error(`unknown mode ${mode}`);
}

async function handLoop(model, result, execute) {
  const messages = [{ role: 'user', content: userPrompt }];
  for (let step = 0; step < maxSteps; step++) {
    result.steps += 1;
    const message = await nextMessage(model, messages, result.usage);
    const toolCalls = message.tool_calls ?? [];
    messages.push({
      role: 'assistant',
      content: message.content ?? '',
      ...(toolCalls.length ? { tool_calls: toolCalls } : {}),
    });
    if (!toolCalls.length) {
      result.final_text = message.content;
      return;
    }
    for (const tc of toolCalls) {
      const content = execute(tc.id, tc.function.name, tc.function.arguments);
      messages.push({ role: 'tool', tool_call_id: tc.id, content });
    }
  }
}

async function runTools(model, result, execute, stream) {
  // The SDK hands a function neither the call id nor the raw arguments: the ids are read from
  // each assistant message as the runner receives it (it then runs that message's calls in
  // order, one at a time).
  const pending = [];
  const runnable = TOOL_SPECS.map(spec => ({
    type: 'function',
    function: {
      name: spec.name,
      description: spec.description,
      parameters: spec.parameters,
      parse: JSON.parse,
      function: args => execute(pending.shift() ?? null, spec.name, JSON.stringify(args)),
    },
  }));
  const runner = client.chat.completions.runTools(
    { model, messages: [{ role: 'user', content: userPrompt }], tools: runnable, stream },
    { maxChatCompletions: maxSteps },
  );
  runner.on('chatCompletion', completion => {
    if (completion.usage) result.usage.push(completion.usage.total_tokens);
  });
  runner.on('message', message => {
    if (message.role !== 'assistant') return;
    result.steps += 1;
    for (const tc of message.tool_calls ?? []) pending.push(tc.id);
  });
  result.final_text = await runner.finalContent();
}

async function runOne(model) {
  const result = { client: 'openai-node', mode, model, final_text: null, steps: 0, executed: [] };
  result.usage = [];
  const execute = (id, name, args) => {
    result.executed.push({ id: id ?? null, name, arguments: args });
    return `executed ${name} ${args}`;
  };
  try {
    if (mode === 'run-tools' || mode === 'run-tools-stream') {
      await runTools(model, result, execute, mode === 'run-tools-stream');
    } else {
      await handLoop(model, result, execute);
    }
  } catch (err) {
    result.error = { name: err?.constructor?.name ?? 'Error', message: String(err?.message ?? err) };
    if (err?.status != null) result.error.status = err.status;
  }
  return result;
}

for (const model of models.split(',')) {
  finish(await runOne(model));
}
