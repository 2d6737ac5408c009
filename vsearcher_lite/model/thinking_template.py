"""The chat template of the Qwen3-VL Thinking checkpoints, as this project renders it, and its
training twin that marks the assistant's own tokens.

The published Thinking template opens every reply with the reasoning: its generation prompt is
``<|im_start|>assistant\\n<think>\\n``, so the model's reply starts inside the thinking. An
assistant turn is re-rendered with its reasoning split off at ``</think>`` (``<think>\\n`` +
reasoning + ``\\n</think>\\n\\n`` + the rest), images as ``<|vision_start|><|image_pad|>
<|vision_end|>``, and a user turn that is one ``<tool_response>`` does not count as a new
question. TRL recognises chat templates by exact text and has no training variant of this one,
so ``thinking_template(training=True)`` renders the same text with ``{% generation %}`` around
what the model writes after the generation prompt: the reasoning onward, the ``<think>\\n`` the
prompt already holds left out, so SFT and GRPO train exactly the tokens a rollout samples.
"""

from __future__ import annotations

# One source for both variants: @GEN@ / @END@ become the generation markers or nothing.
_TEMPLATE = r"""
{%- set image_count = namespace(value=0) -%}
{%- set video_count = namespace(value=0) -%}
{%- macro render_content(content, count_vision) -%}
    {%- if content is string -%}
        {{- content -}}
    {%- else -%}
        {%- for part in content -%}
            {%- if part.type == 'image' or 'image' in part or 'image_url' in part -%}
                {%- if count_vision -%}
                    {%- set image_count.value = image_count.value + 1 -%}
                {%- endif -%}
                {%- if add_vision_id -%}{{- 'Picture ' ~ image_count.value ~ ': ' -}}{%- endif -%}
                {{- '<|vision_start|><|image_pad|><|vision_end|>' -}}
            {%- elif part.type == 'video' or 'video' in part -%}
                {%- if count_vision -%}
                    {%- set video_count.value = video_count.value + 1 -%}
                {%- endif -%}
                {%- if add_vision_id -%}{{- 'Video ' ~ video_count.value ~ ': ' -}}{%- endif -%}
                {{- '<|vision_start|><|video_pad|><|vision_end|>' -}}
            {%- elif 'text' in part -%}
                {{- part.text -}}
            {%- endif -%}
        {%- endfor -%}
    {%- endif -%}
{%- endmacro -%}
{%- if tools -%}
    {{- '<|im_start|>system\n' -}}
    {%- if messages[0].role == 'system' -%}
        {{- render_content(messages[0].content, false) + '\n\n' -}}
    {%- endif -%}
    {{- '# Tools\n\nYou may call one or more functions to assist with the user query.\n\n' -}}
    {{- 'You are provided with function signatures within <tools></tools> XML tags:\n<tools>' -}}
    {%- for tool in tools -%}
        {{- '\n' -}}{{- tool | tojson -}}
    {%- endfor -%}
    {{- '\n</tools>\n\nFor each function call, return a json object with function name and ' -}}
    {{- 'arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n' -}}
    {{- '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n' -}}
{%- elif messages and messages[0].role == 'system' -%}
    {{- '<|im_start|>system\n' + render_content(messages[0].content, false) + '<|im_end|>\n' -}}
{%- endif -%}
{#- the last user turn that is a question, not a tool's response -#}
{%- set ns = namespace(looking=true, last_query=messages|length - 1) -%}
{%- for message in messages[::-1] -%}
    {%- if ns.looking and message.role == 'user' -%}
        {%- set text = render_content(message.content, false) -%}
        {%- if not (text.startswith('<tool_response>') and text.endswith('</tool_response>')) -%}
            {%- set ns.looking = false -%}
            {%- set ns.last_query = (messages|length - 1) - loop.index0 -%}
        {%- endif -%}
    {%- endif -%}
{%- endfor -%}
{%- for message in messages -%}
    {%- set content = render_content(message.content, true) -%}
    {%- if message.role == 'user' or (message.role == 'system' and not loop.first) -%}
        {{- '<|im_start|>' + message.role + '\n' + content + '<|im_end|>\n' -}}
    {%- elif message.role == 'assistant' -%}
        {%- set reasoning = '' -%}
        {%- if message.reasoning_content is string -%}
            {%- set reasoning = message.reasoning_content -%}
        {%- elif '</think>' in content -%}
            {%- set reasoning = content.split('</think>')[0].rstrip('\n') -%}
            {%- set reasoning = reasoning.split('<think>')[-1].lstrip('\n') -%}
            {%- set content = content.split('</think>')[-1].lstrip('\n') -%}
        {%- endif -%}
        {%- if loop.index0 > ns.last_query and (loop.last or reasoning) -%}
            {%- set head = '<|im_start|>assistant\n<think>\n' -%}
            {%- set body = reasoning.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') -%}
        {%- else -%}
            {%- set head = '<|im_start|>assistant\n' -%}
            {%- set body = content -%}
        {%- endif -%}
        {%- set calls = namespace(text='') -%}
        {%- for call in message.tool_calls or [] -%}
            {%- if not loop.first or content -%}
                {%- set calls.text = calls.text + '\n' -%}
            {%- endif -%}
            {%- set fn = call.function if call.function else call -%}
            {%- set args = fn.arguments if fn.arguments is string else (fn.arguments | tojson) -%}
            {%- set calls.text = calls.text + '<tool_call>\n{"name": "' + fn.name
                                 + '", "arguments": ' + args + '}\n</tool_call>' -%}
        {%- endfor -%}
        {{- head -}}
        @GEN@{{- body + calls.text + '<|im_end|>\n' -}}@END@
    {%- elif message.role == 'tool' -%}
        {%- if loop.first or messages[loop.index0 - 1].role != 'tool' -%}
            {{- '<|im_start|>user' -}}
        {%- endif -%}
        {{- '\n<tool_response>\n' + content + '\n</tool_response>' -}}
        {%- if loop.last or messages[loop.index0 + 1].role != 'tool' -%}
            {{- '<|im_end|>\n' -}}
        {%- endif -%}
    {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{- '<|im_start|>assistant\n<think>\n' -}}
{%- endif -%}
"""

#: What the generation prompt writes after the assistant header: the reply starts inside it.
REPLY_OPENING = "<think>\n"


def thinking_template(training: bool = False) -> str:
    """The Thinking chat template (``training``: with ``{% generation %}`` markers around what
    the model writes; the rendered text is the same)."""
    marks = ("{%- generation -%}", "{%- endgeneration -%}") if training else ("", "")
    return _TEMPLATE.replace("@GEN@", marks[0]).replace("@END@", marks[1]).strip() + "\n"


def probe_conversations(image) -> list[tuple[list[dict], bool]]:
    """``(messages, add_generation_prompt)`` pairs that tell the Thinking template from others by
    what they render: a question with an image, a tool call, a tool response holding an image,
    an answer, a turn without reasoning, and the generation prompt."""
    text = lambda s: {"type": "text", "text": s}  # noqa: E731
    pic = {"type": "image", "image": image}
    call = '<tool_call>\n{"name": "image_search", "arguments": {}}\n</tool_call>'
    episode = [
        {"role": "system", "content": [text("You are a search agent.")]},
        {"role": "user", "content": [pic, text("Which bridge is this?")]},
        {"role": "assistant", "content": [text("<think>\nSearch by image.\n</think>\n" + call)]},
        {"role": "user", "content": [text("<tool_response>\n1. A bridge\n"), pic,
                                     text("</tool_response>")]},
        {"role": "assistant", "content": [text("<think>\nIt is Trel.\n</think>\n"
                                               "<answer>Trel</answer>")]},
    ]
    second = episode + [{"role": "user", "content": [text("And its river?")]},
                        {"role": "assistant", "content": [text("No idea.")]}]
    return [(episode, False), (episode[:2], True), (second, False)]


def renders_like_thinking(processor, image) -> bool:
    """Whether ``processor``'s own chat template renders the probe conversations exactly as the
    Thinking template does (the check before its training twin stands in for it)."""
    for messages, prompt in probe_conversations(image):
        try:
            own = processor.apply_chat_template(messages, tokenize=False,
                                                add_generation_prompt=prompt)
            ours = processor.apply_chat_template(messages, tokenize=False,
                                                 add_generation_prompt=prompt,
                                                 chat_template=thinking_template())
        except Exception:  # a template that cannot render these is not the Thinking one
            return False
        if own != ours:
            return False
    return True
