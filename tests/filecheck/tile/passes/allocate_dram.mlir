// RUN: snow-opt %s -p 'nn-prepare,nn-to-tile,tile-loop-order,allocate-dram' | filecheck %s
// RUN: snow-opt %s -p 'snowflake-lower' | filecheck %s --check-prefix=LINKED
// RUN: snow-opt %s -p 'nn-prepare,nn-to-tile,tile-loop-order,allocate-dram' | snow-opt -p 'tile-to-asm,balance-loads,schedule-asm,fill-delay-slots,link-segments,icache-banking' | filecheck %s --check-prefix=LINKED

// Two convs, the second reading the first's output: allocate-dram gives the model one DRAM plan
// (weights once at the bottom, conv1's output region is conv2's maps region, conv2's output
// reuses the input's pages once the input is dead), link-segments one program with two markers.

func.func @main(%x: tensor<1x16x8x8xf32>) -> tensor<1x16x8x8xf32> {
  %w1 = nn.constant dense<0.01> : tensor<16x16x3x3xf32>
  %b1 = nn.constant dense<0.1> : tensor<16xf32>
  %c1 = nn.conv2d %x, %w1, %b1 {onnx_node = "conv1", strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 1 : i64, relu} : (tensor<1x16x8x8xf32>, tensor<16x16x3x3xf32>, tensor<16xf32>) -> tensor<1x16x8x8xf32>
  %w2 = nn.constant dense<0.02> : tensor<16x16x3x3xf32>
  %b2 = nn.constant dense<0.1> : tensor<16xf32>
  %c2 = nn.conv2d %c1, %w2, %b2 {onnx_node = "conv2", strides = array<i64: 1, 1>, pads = array<i64: 1, 1, 1, 1>, dilations = array<i64: 1, 1>, groups = 1 : i64, relu} : (tensor<1x16x8x8xf32>, tensor<16x16x3x3xf32>, tensor<16xf32>) -> tensor<1x16x8x8xf32>
  func.return %c2 : tensor<1x16x8x8xf32>
}

// CHECK:      tile.dram_plan {
// CHECK-NEXT:   tile.tensor @conv1.weights {offset = 0 : i64, size = 5120 : i64, live = array<i64: 0, 1>, role = "weights"}
// CHECK-NEXT:   tile.tensor @conv2.weights {offset = 8192 : i64, size = 5120 : i64, live = array<i64: 0, 1>, role = "weights"}
// CHECK-NEXT:   tile.tensor @conv1.maps {offset = 16384 : i64, size = 2048 : i64, live = array<i64: 0, 0>, role = "activation"}
// CHECK-NEXT:   tile.tensor @conv2.output {offset = 16384 : i64, size = 2048 : i64, live = array<i64: 1, 1>, role = "activation"}
// CHECK-NEXT:   tile.tensor @conv1.output {offset = 20480 : i64, size = 2048 : i64, live = array<i64: 0, 1>, role = "activation"}
// CHECK-NEXT: }
// CHECK:      tile.layer @conv1 conv
// CHECK-NEXT:   tile.dram_region @conv1.maps {offset = 16384 : i64, size = 2048 : i64, label = "maps", tensor = "conv1.maps"}
// CHECK:        tile.dram_region @conv1.output {offset = 20480 : i64, size = 2048 : i64, label = "output", tensor = "conv1.output"}
// CHECK:        tile.load {buffer = #tile<buffer maps>, length = 1024 : i64, dram_addr = 16384 : i64
// CHECK:      tile.layer @conv2 conv attributes {{.*}}fence{{.*}}}
// CHECK-NEXT:   tile.dram_region @conv2.maps {offset = 20480 : i64, size = 2048 : i64, label = "maps", tensor = "conv1.output"}

// LINKED:      nn.conv2d {{.*}}image = "segment0", layer = "conv1"
// LINKED:      nn.conv2d {{.*}}image = "segment0", layer = "conv2"
// LINKED:      snowflake_asm.image @segment0 attributes {dram = "model", segment = "0"
// LINKED:        snowflake_asm.segment output @conv1.output at 20480 size 2048
// LINKED:        snowflake_asm.program @code code_base 24576 attributes {loads_balanced} {
// LINKED-NEXT:     snowflake_asm.label @conv1 {layer = {kind = "conv", mode = "COOP", loop_order = "Kloop"{{.*}}x = "conv1.maps", y = "conv1.output", w = "conv1.weights"}}
// LINKED:          snowflake_asm.label @conv2 {layer = {kind = "conv"{{.*}}x = "conv1.output", y = "conv2.output", w = "conv2.weights"}}
// LINKED-COUNT-16: snowflake_asm.vmov coop mask
// LINKED-NOT:    snowflake_asm.image
