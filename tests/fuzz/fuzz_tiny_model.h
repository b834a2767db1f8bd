// The tiny preset with dummy weights, opened once per fuzz process (targets that validate
// requests against a real model's vocabulary and limits).
#pragma once

#include <cstdio>
#include <cstdlib>

#include "model/model_directory.h"

namespace tpserve {

inline const ModelDirectory& FuzzTinyModel() {
  static ModelDirectory* model = [] {
    ModelSource source;
    source.model = "tiny";
    source.load_format = "dummy";
    source.assets_dir = TPSERVE_FUZZ_ASSETS_DIR;
    auto opened = OpenModel(source);
    if (!opened.ok()) {
      std::fprintf(stderr, "cannot open the tiny dummy model: %s\n", opened.status().ToString().c_str());
      std::abort();
    }
    return new ModelDirectory(std::move(opened).value());
  }();
  return *model;
}

}  // namespace tpserve
