// A multi-step tool loop on the Vercel AI SDK (`ai` 6) with `@ai-sdk/openai-compatible` (Chat
// Completions) or `@ai-sdk/anthropic` (Anthropic Messages): tools with `execute` functions, the
// SDK runs the loop (`stopWhen: stepCountIs(n)`).
//
// Usage: node ai_sdk_loop.mjs <base-url> <models> <mode> [max-steps]
//   (or TOOLCALL_BASE_URL, TOOLCALL_MODEL, TOOLCALL_MODE, TOOLCALL_MAX_STEPS)
// <models> is one model name or several separated by commas (one loop each, in order).
// Modes: generate (generateText), stream (streamText, consuming fullStream), stream-usage
// (streamText with the provider's `includeUsage: true`, so stream_options.include_usage);
// anthropic-generate and anthropic-stream: the same two on `@ai-sdk/anthropic`, whose base URL
// is the same `.../v1` (it posts to `/messages`).
// Prints one JSON object per model, one per line:
//   {final_text, steps, usage: [total tokens per step that reported usage],
//    executed: [{id, name, arguments}], error: null | {name, message, status?, code?}}
import { createAnthropic } from '@ai-sdk/anthropic';
import { createOpenAICompatible } from '@ai-sdk/openai-compatible';
import { generateText, stepCountIs, streamText, tool } from 'ai';
import { z } from 'zod';

import { finish, parseArgs, userPrompt } from './common.mjs';

const { baseURL, model: models, mode: fullMode, maxSteps } = parseArgs();
const anthropic = fullMode.startsWith('anthropic-');
const mode = anthropic ? fullMode.slice('anthropic-'.length) : fullMode;
const languageModel = anthropic
  ? createAnthropic({ baseURL, apiKey: 'sk-test' })
  : createOpenAICompatible({
      name: 'toolcall-proxy',
      baseURL,
      apiKey: 'sk-test',
      includeUsage: mode === 'stream-usage',
    }).chatModel;

// An Error (generateText), or the provider's error object from an error part (streamText:
// the `error` of a `data: {"error": {...}}` event or of Anthropic's `error` event, not an
// Error instance).
function describeError(err) {
  const name = err instanceof Error ? err.name : `${err?.type ?? 'unknown'} error part`;
  const error = { name, message: String(err?.message ?? err) };
  if (err?.statusCode !== undefined) error.status = err.statusCode;
  if (err?.code !== undefined) error.code = err.code;
  return error;
}

async function runOne(model) {
  const client = anthropic ? 'ai-sdk-anthropic' : 'ai-sdk';
  const result = { client, mode, model, final_text: null, steps: 0, executed: [] };
  result.usage = [];
  const recordSteps = steps => {
    result.steps = steps.length;
    result.usage = steps.map(step => step.usage?.totalTokens).filter(total => total != null);
  };
  const record = name => (input, { toolCallId }) => {
    const args = JSON.stringify(input);
    result.executed.push({ id: toolCallId, name, arguments: args });
    return `executed ${name} ${args}`;
  };
  // Declared in this order: the simulated model calls the first tool, and the second for
  // parallel calls.
  const tools = {
    run_shell_command: tool({
      description: 'Run a shell command',
      inputSchema: z.object({ command: z.string() }),
      execute: record('run_shell_command'),
    }),
    read_file: tool({
      description: 'Read a file',
      inputSchema: z.object({ path: z.string() }),
      execute: record('read_file'),
    }),
  };
  const settings = {
    model: languageModel(model),
    tools,
    prompt: userPrompt,
    stopWhen: stepCountIs(maxSteps),
    maxRetries: 0,
    timeout: 20_000,
    // Anthropic requires max_tokens; the SDK picks 4096 (with a warning) for unknown models.
    ...(anthropic ? { maxOutputTokens: 1024 } : {}),
  };
  try {
    if (mode === 'generate') {
      const out = await generateText(settings);
      recordSteps(out.steps);
      result.final_text = out.text;
      result.finish_reason = out.finishReason;
    } else if (mode === 'stream' || mode === 'stream-usage') {
      // streamText reports errors as stream parts (and to onError), it does not throw them.
      const out = streamText({ ...settings, onError: () => {} });
      for await (const part of out.fullStream) {
        if (part.type === 'error') throw part.error;
      }
      recordSteps(await out.steps);
      result.final_text = await out.text;
      result.finish_reason = await out.finishReason;
    } else {
      throw new Error(`unknown mode ${mode}`);
    }
  } catch (err) {
    result.error = describeError(err);
  }
  return result;
}

for (const model of models.split(',')) {
  finish(await runOne(model));
}
