// The tool loop every Vercel AI SDK script runs (`ai` 6): tools with `execute` functions, the
// SDK runs the loop (`stopWhen: stepCountIs(n)`), with `generateText` or `streamText`.
import { generateText, stepCountIs, streamText, tool } from 'ai';
import { z } from 'zod';

import { userPrompt } from './common.mjs';

// An Error (generateText), or the provider's error object from an error part (streamText:
// the `error` of a `data: {"error": {...}}` event or of Anthropic's `error` event, not an
// Error instance).
function describeError(err) {
  const name = err instanceof Error ? err.name : `${err?.type ?? 'unknown'} error part`;
  const error = { name, message: String(err?.message ?? err) };
  if (err?.statusCode !== undefined) error.status = err.statusCode;
  // An HTTP error's `code` is in the parsed error body (`data`) of an APICallError.
  const code = err?.code ?? err?.data?.error?.code;
  if (code !== undefined && code !== null) error.code = code;
  return error;
}

// One loop on `languageModel` (a provider's model object); `model` names it in the result,
// `client` names the SDK and provider, `extra` adds settings a provider needs.
// Modes: generate (generateText), stream (streamText, consuming fullStream); `stream-*` modes
// stream too (the caller configured the provider for them).
export async function runLoop(languageModel, model, mode, maxSteps, client = 'ai-sdk', extra = {}) {
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
    model: languageModel,
    tools,
    prompt: userPrompt,
    stopWhen: stepCountIs(maxSteps),
    maxRetries: 0,
    timeout: 20_000,
    ...extra,
  };
  try {
    if (mode === 'generate') {
      const out = await generateText(settings);
      recordSteps(out.steps);
      result.final_text = out.text;
      result.finish_reason = out.finishReason;
    } else if (mode === 'stream' || mode.startsWith('stream-')) {
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
