"""T5's special token ids, shared by the vocabulary (tlm.data) and the decoders (tlm.models).

As in the public `spiece.model` files and seqio's SentencePieceVocabulary: pad = 0 (also the
decoder's start token), eos = 1, unk = 2, no bos. Here because tlm.data and tlm.models are
independent siblings: neither may import the other's copy.
"""

PAD_ID = 0
EOS_ID = 1
UNK_ID = 2
