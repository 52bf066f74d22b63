# router-svc core: pure modules (no network I/O, no clock of their own). One library per module;
# rt_core links them all. Included from router-svc/CMakeLists.txt.
set(RT_SRC ${CMAKE_CURRENT_SOURCE_DIR}/src)

function(rt_core_module name)
    cmake_parse_arguments(M "" "" "DEPS" ${ARGN})
    add_library(rt_${name} STATIC ${RT_SRC}/${name}.c)
    target_include_directories(rt_${name} PUBLIC ${RT_SRC} ${PROJECT_SOURCE_DIR}/proto)
    target_link_libraries(rt_${name} PUBLIC ${M_DEPS} tg_common proto)
endfunction()

rt_core_module(mask)

# providers/: the provider families (pure: URL, headers, wire API, error classes). They use the
# router's generic error classes and usage's bounded JSON parse, and config uses them: CMake links
# the cycle of static libraries as it does any other.
add_library(rt_providers STATIC ${RT_SRC}/providers/registry.c ${RT_SRC}/providers/openai.c
                                ${RT_SRC}/providers/azure.c ${RT_SRC}/providers/oauth.c
                                ${RT_SRC}/providers/dialect.c ${RT_SRC}/providers/gemini.c
                                ${RT_SRC}/providers/google.c ${RT_SRC}/providers/crypto.c
                                ${RT_SRC}/providers/sigv4.c ${RT_SRC}/providers/eventstream.c
                                ${RT_SRC}/providers/bedrock.c
                                ${RT_SRC}/providers/anthropic.c
                                ${RT_SRC}/providers/openai_compat.c)
target_include_directories(rt_providers PUBLIC ${RT_SRC} ${PROJECT_SOURCE_DIR}/proto)
target_link_libraries(rt_providers PUBLIC tg_common rt_usage rt_router rt_sse PkgConfig::JANSSON
                      PkgConfig::CRYPTO)
rt_core_module(trail DEPS rt_mask)
rt_core_module(limiter)
rt_core_module(jbound DEPS PkgConfig::JANSSON)
# prices: the price maps; the built-in one (data/model_prices.json) is compiled in.
# (the data in a library of its own: only bytes, nothing to instrument or fuzz)
add_library(rt_prices_data STATIC)
tg_embed_file(rt_prices_data rt_prices_builtin_json
              ${CMAKE_CURRENT_SOURCE_DIR}/data/model_prices.json)
rt_core_module(prices DEPS rt_prices_data rt_jbound tg_units PkgConfig::JANSSON Threads::Threads)
rt_core_module(config DEPS tg_yaml tg_kafka_opts tg_units tg_redis_url rt_providers rt_prices)
target_sources(rt_config PRIVATE ${RT_SRC}/config_model.c # model_list: config_int.h
                                 ${RT_SRC}/config_redis.c) # tollgate.redis, LiteLLM's redis_*
# extra_fields: LiteLLM fields keys and teams store without acting on them (their tables:
# key_extra.c, team_extra.c)
rt_core_module(extra_fields DEPS PkgConfig::JANSSON)
rt_core_module(keys DEPS rt_config rt_extra_fields tg_units PkgConfig::JANSSON Threads::Threads)
target_sources(rt_keys PRIVATE ${RT_SRC}/key_extra.c) # LiteLLM fields stored, not acted on
rt_core_module(teams DEPS rt_config rt_extra_fields tg_units PkgConfig::JANSSON Threads::Threads)
target_sources(rt_teams PRIVATE ${RT_SRC}/team_extra.c) # LiteLLM fields stored, not acted on
rt_core_module(usage DEPS rt_config rt_jbound PkgConfig::JANSSON)
rt_core_module(router DEPS rt_config rt_keys rt_teams rt_limiter rt_trail rt_mask Threads::Threads)

# rt_core: every core module.
add_library(rt_core INTERFACE)
target_link_libraries(rt_core INTERFACE rt_config rt_router rt_keys rt_teams rt_trail rt_mask
                      rt_usage rt_limiter rt_prices rt_jbound rt_extra_fields)
