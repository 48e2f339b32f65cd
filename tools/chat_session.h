/* The messages of a `tq chat --session FILE` conversation (doc/chat.md, "Sessions").
 *
 * A session is two files: FILE, a prompt cache (engine/prompt_cache.h: the KV cache of the
 * conversation's tokens, checked against the model file and the KV scheme), and FILE.turns,
 * the messages those tokens were laid out from. The turns are what resuming needs (each turn
 * lays out the whole conversation again); the prompt cache only saves prefill, and chat keeps
 * of it exactly the tokens that the resumed conversation's layout starts with, so a cache that
 * does not match its turns costs a prefill, never a wrong continuation.
 *
 * FILE.turns format (text header, binary-safe contents):
 *   "tq-chat-turns 1\n", then per message: "ROLE LEN\n" (ROLE system|user|assistant, LEN the
 *   content's bytes in decimal), the LEN content bytes, "\n". Nothing after the last message. */
#ifndef TQ_TOOLS_CHAT_SESSION_H
#define TQ_TOOLS_CHAT_SESSION_H

#include <stddef.h>

#include "chat_template.h"

/* Largest FILE.turns read (a conversation longer than any context holds many times over). */
#define CHAT_TURNS_MAX_BYTES ((size_t)64 << 20)

/* "FILE.turns" for FILE, malloc'd; NULL when memory is short. */
char *chat_session_turns_path(const char *path);

/* Writes msgs[0, n) to path atomically (regular_file_write_atomic). Returns 0, or 1 with a
 * one-line reason in why. */
int chat_session_write_turns(const char *path, const chat_msg *msgs, size_t n, char *why, size_t why_cap);

/* Called for each message read, in order; role is a static string ("system", "user",
 * "assistant"), content len bytes (NUL-terminated copy valid during the call). Returns 0 to go
 * on, non-zero to stop (out of memory): the read then fails. */
typedef int (*chat_turn_fn)(void *ctx, const char *role, const char *content, size_t len);

/* Reads path. Returns 0 (every message handed to fn), 1 when there is no file, or -1 with a
 * one-line reason in why (not a turns file, truncated, a bad role or length, too big, I/O, fn
 * failed); fn may have been called for some messages before a -1. */
int chat_session_read_turns(const char *path, chat_turn_fn fn, void *ctx, char *why, size_t why_cap);

#endif
