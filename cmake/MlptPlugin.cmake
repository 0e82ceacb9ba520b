# mlpt_add_plugin(<name> SOURCES ... [LIBS ...]): a plugin shared object lib<name>.so that exports
# only the entry point, built into ${MLPT_PLUGIN_BUILD_DIR} and installed into the plugin folder.
function(mlpt_add_plugin name)
  cmake_parse_arguments(P "" "" "SOURCES;LIBS" ${ARGN})
  add_library(${name} MODULE ${P_SOURCES})
  target_link_libraries(${name} PRIVATE mlpt::sdk mlpt_warnings ${P_LIBS})
  set_target_properties(${name} PROPERTIES
    PREFIX "lib"
    C_VISIBILITY_PRESET hidden
    CXX_VISIBILITY_PRESET hidden
    VISIBILITY_INLINES_HIDDEN ON
    LIBRARY_OUTPUT_DIRECTORY ${MLPT_PLUGIN_BUILD_DIR})
  target_link_options(${name} PRIVATE -Wl,--no-undefined)
  install(TARGETS ${name} LIBRARY DESTINATION ${MLPT_PLUGIN_INSTALL_DIR} COMPONENT plugins)
endfunction()
