/* A conversation as the model's prompt tokens, shared by tq chat and tq serve: which chat
 * template family the model uses, and the conversation laid out in it and tokenized. Messages
 * go to stderr prefixed "tq CMD: ". */
#ifndef TQ_TOOLS_CHAT_PROMPT_H
#define TQ_TOOLS_CHAT_PROMPT_H

#include <stddef.h>
#include <stdint.h>

#include "chat_template.h"
#include "model_session.h"

/* The family: name (--chat-template, already checked) when not NULL, else the model's
 * tokenizer.chat_template, else (no template in the file) the one whose turn marker the
 * vocabulary has. Returns 0, or 1 after printing why. */
int chat_prompt_family(const session *s, const char *cmd, const char *name, chat_family *out);

/* msgs[0, n) laid out by family f with the opening of the assistant's turn, tokenized with its
 * control tokens parsed, BOS in front when the vocabulary asks and the text does not start
 * with it. *ids malloc'd. Uses the session's tokenizer (not reentrant: one caller at a time).
 * Returns 0, or 1 after printing why. */
int chat_prompt_tokens(session *s, const char *cmd, chat_family f, const chat_msg *msgs, size_t n, int32_t **ids,
                       size_t *n_ids);

#endif
