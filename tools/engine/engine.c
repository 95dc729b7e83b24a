/* tools/engine/engine.c - see engine.h (being written). */
#include "tools/engine/engine.h"
