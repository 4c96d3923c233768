// RUN: snow-opt %s -p split-recurrence | filecheck %s
// RUN: snow-opt %s -p split-recurrence,sequence-gemm | filecheck %s --check-prefix=DEVICE

// A bidirectional LSTM (T = 6, B = 1, I = 16, H = 4) with initial states: its input projection
// becomes a dense over the T·B rows (both directions' W side by side, Wb + Rb as the bias), its
// recurrence the snowir kind LSTMRecurrence reading the gates, R and the initial states. One with
// a clip stays the ONNX node, with the reason. A GRU with linear_before_reset keeps its h gate's
// recurrent bias for the recurrence (Rb_h, slot 3: inside the reset gate's product).

func.func @main(%in: tensor<1x6x16xf32>) -> (tensor<6x2x1x4xf32>, tensor<2x1x4xf32>, tensor<6x1x1x4xf32>, tensor<6x1x1x4xf32>) {
  %x = nn.reshape %in : (tensor<1x6x16xf32>) -> tensor<6x1x16xf32>
  %w = nn.constant dense<0.1> : tensor<2x16x16xf32>
  %r = nn.constant dense<0.2> : tensor<2x16x4xf32>
  %b = nn.constant dense<0.05> : tensor<2x32xf32>
  %h0 = nn.constant dense<0.5> : tensor<2x1x4xf32>
  %c0 = nn.constant dense<-0.5> : tensor<2x1x4xf32>
  %y, %yh = nn.host "LSTM"(%x, %w, %r, %b, %h0, %c0) {onnx_node = "lstm", attrs = {direction = "bidirectional", hidden_size = 4 : i64}, opset = 13 : i64, slots = array<i64: 0, 1, 2, 3, 5, 6>, n_slots = 7 : i64} : (tensor<6x1x16xf32>, tensor<2x16x16xf32>, tensor<2x16x4xf32>, tensor<2x32xf32>, tensor<2x1x4xf32>, tensor<2x1x4xf32>) -> (tensor<6x2x1x4xf32>, tensor<2x1x4xf32>)
  %w1 = nn.constant dense<0.1> : tensor<1x16x16xf32>
  %r1 = nn.constant dense<0.2> : tensor<1x16x4xf32>
  %z = nn.host "LSTM"(%x, %w1, %r1) {onnx_node = "clipped", attrs = {clip = 3.0 : f32, hidden_size = 4 : i64}, opset = 13 : i64} : (tensor<6x1x16xf32>, tensor<1x16x16xf32>, tensor<1x16x4xf32>) -> tensor<6x1x1x4xf32>
  %gw = nn.constant dense<0.1> : tensor<1x12x16xf32>
  %gr = nn.constant dense<0.2> : tensor<1x12x4xf32>
  %gb = nn.constant dense<0.05> : tensor<1x24xf32>
  %g = nn.host "GRU"(%x, %gw, %gr, %gb) {onnx_node = "gru", attrs = {hidden_size = 4 : i64, linear_before_reset = 1 : i64}, opset = 13 : i64} : (tensor<6x1x16xf32>, tensor<1x12x16xf32>, tensor<1x12x4xf32>, tensor<1x24xf32>) -> tensor<6x1x1x4xf32>
  func.return %y, %yh, %z, %g : tensor<6x2x1x4xf32>, tensor<2x1x4xf32>, tensor<6x1x1x4xf32>, tensor<6x1x1x4xf32>
}

// CHECK-NOT:  nn.host "LSTM"(%x, %w, %r
// CHECK:      %[[W:.*]] = nn.constant dense_resource<lstm_w_{{[0-9]+}}> : tensor<32x16xf32>
// CHECK-NEXT: %[[B:.*]] = nn.constant dense_resource<lstm_b_{{[0-9]+}}> : tensor<32xf32>
// CHECK-NEXT: %[[FLAT:.*]] = nn.reshape %x {onnx_node = "lstm.steps_flat"} : (tensor<6x1x16xf32>) -> tensor<6x16xf32>
// CHECK-NEXT: %[[D:.*]] = nn.dense %[[FLAT]], %[[W]], %[[B]] {onnx_node = "lstm.input_projection"} : (tensor<6x16xf32>, tensor<32x16xf32>, tensor<32xf32>) -> tensor<6x32xf32>
// CHECK-NEXT: %[[G:.*]] = nn.reshape %[[D]] {onnx_node = "lstm.gates"} : (tensor<6x32xf32>) -> tensor<6x1x32xf32>
// CHECK-NEXT: %y, %yh = nn.host "LSTMRecurrence"(%[[G]], %r, %h0, %c0) {host_reason = "the LSTM's recurrence: {{.*}}", onnx_node = "lstm", opset = 1 : i64, attrs = {direction = "bidirectional", hidden_size = 4 : i64}, domain = "snowir"} : (tensor<6x1x32xf32>, tensor<2x16x4xf32>, tensor<2x1x4xf32>, tensor<2x1x4xf32>) -> (tensor<6x2x1x4xf32>, tensor<2x1x4xf32>)
// CHECK:      %z = nn.host "LSTM"(%x, %w1, %r1) {onnx_node = "clipped", host_reason = "ONNX LSTM: not split (split-recurrence): attribute clip (a clip, or activation parameters); the whole LSTM runs on the host", {{.*}}}
// CHECK:      %[[GB:.*]] = nn.constant dense_resource<gru_b_{{[0-9]+}}> : tensor<12xf32>
// CHECK-NEXT: %[[RBH:.*]] = nn.constant dense_resource<gru_rb_h_{{[0-9]+}}> : tensor<1x4xf32>
// CHECK:      nn.dense {{.*}} {onnx_node = "gru.input_projection"} : (tensor<6x16xf32>, tensor<12x16xf32>, tensor<12xf32>) -> tensor<6x12xf32>
// CHECK-NEXT: %g_gates = nn.reshape %g_projection {onnx_node = "gru.gates"} : (tensor<6x12xf32>) -> tensor<6x1x12xf32>
// CHECK-NEXT: %g = nn.host "GRURecurrence"(%g_gates, %gr, %[[RBH]]) {host_reason = "the GRU's recurrence: {{.*}}", onnx_node = "gru", opset = 1 : i64, attrs = {direction = "forward", hidden_size = 4 : i64, linear_before_reset = 1 : i64}, slots = array<i64: 0, 1, 3>, n_slots = 4 : i64, domain = "snowir"}

// The dense is what sequence-gemm runs on the device: one 1x1 conv over the T pixels.
// DEVICE:     nn.conv2d {{.*}} {onnx_node = "lstm.input_projection", from_dense, {{.*}}} : (tensor<1x16x{{[16]}}x{{[16]}}xf32>, tensor<32x16x1x1xf32>, tensor<32xf32>) -> tensor<1x32x{{[16]}}x{{[16]}}xf32>
// DEVICE:     nn.host "LSTMRecurrence"
