"""Knowledge-graph stages shared by the knowledge-enhanced models (ERNIE, KagNet): read
triples (`triples`, `graph`, `KnowledgeGraphGen`), train entity embeddings (`transe`,
`KGEmbeddingTrainer`), link text to entities (`linking`, `EntityLinker`) and train a model
with the embeddings (`KnowledgeTrainer`). CONTRACTS "Knowledge graphs"."""
