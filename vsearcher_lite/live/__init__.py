"""The live web: Wikidata and Wikipedia in place of the sandbox, the agent's tools over real
search APIs, and the OpenAI-compatible chat client. The sandbox course never imports this
package; ``backends`` and ``synthesis.sources`` import it inside the functions that choose live
mode or an ``openai`` backend.

Modules: ``knowledge`` (``LiveKnowledge``, the live ``KnowledgeSource``), ``sparql`` (its Wikidata
queries), ``html`` (reading Wikipedia and other pages), ``tools`` (the live backends, picked from
the keys that are set), ``search`` (text and image search APIs), ``read`` (``visit``: a guarded
fetch, Jina Reader, the summariser), ``parse`` (the APIs' answers), ``secrets`` (API keys from the
environment or a ``.env`` file), ``openai`` (``OpenAIChat``).
"""
