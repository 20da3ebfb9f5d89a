import pytest
import torch
import torch.nn.functional as F

from course_utils import classify, data, vit
from course_utils.blocks import TransformerBlock


@pytest.mark.parametrize("shape,patch", [((2, 1, 8, 8), 2), ((3, 3, 12, 8), 4), ((1, 2, 6, 6), 3), ((2, 1, 4, 4), 1)])
def test_patchify_equals_unfold(shape, patch):
    images = torch.randn(*shape)
    want = F.unfold(images, patch, stride=patch).transpose(1, 2)
    got = vit.patchify(images, patch)
    B, C, H, W = shape
    assert got.shape == (B, (H // patch) * (W // patch), C * patch * patch)
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_patchify_by_hand_is_row_major():
    images = torch.arange(2 * 16, dtype=torch.float32).view(1, 2, 4, 4)    # two channels
    p = vit.patchify(images, 2)
    # patch 1 is the top-right square: rows 0-1, columns 2-3
    assert p[0, 1].tolist() == [2, 3, 6, 7, 18, 19, 22, 23]
    for r in range(2):
        for c in range(2):
            manual = images[0, :, 2 * r:2 * r + 2, 2 * c:2 * c + 2].reshape(-1)
            assert torch.equal(p[0, 2 * r + c], manual)


def test_patchify_rejects_bad_input():
    with pytest.raises(ValueError, match="divide"):
        vit.patchify(torch.zeros(1, 1, 8, 8), 3)
    with pytest.raises(ValueError, match=r"\(batch, C, H, W\)"):
        vit.patchify(torch.zeros(8, 8), 2)
    with pytest.raises(ValueError, match="int >= 1"):
        vit.patchify(torch.zeros(1, 1, 8, 8), 0)


def _manual_vit_forward(model, images):
    """The ViT forward written out from its sub-modules."""
    B = images.shape[0]
    x = model.patch_embed(vit.patchify(images, model.cfg.patch))
    x = torch.cat([model.cls_token.expand(B, 1, -1), x], dim=1)
    x = x + model.positions.embedding.weight[: x.shape[1]]
    for layer in model.stack.layers:
        x = layer(x).x
    return model.head(model.stack.norm(x)[:, 0])


@pytest.mark.parametrize("norm_first", [True, False])
def test_vit_forward_is_the_composition_of_its_parts(norm_first):
    torch.manual_seed(0)
    model = vit.ViT(vit.ViTConfig(image_size=8, patch=2, channels=1, n_classes=10, d_model=16, n_heads=4, n_layers=3, norm_first=norm_first)).eval()
    assert all(type(layer) is TransformerBlock for layer in model.stack.layers)   # the course's block, not a copy
    with torch.no_grad():
        model.cls_token.normal_()
    images = torch.rand(5, 1, 8, 8)
    logits = model(images)
    assert logits.shape == (5, 10)
    torch.testing.assert_close(logits, _manual_vit_forward(model, images))
    logits2, weights = model.forward_with_weights(images)
    torch.testing.assert_close(logits2, logits)
    assert len(weights) == 3 and all(w.shape == (5, 4, 17, 17) for w in weights)
    torch.testing.assert_close(weights[0].sum(-1), torch.ones(5, 4, 17))


def test_vit_uses_position_and_class_token():
    torch.manual_seed(0)
    model = vit.ViT(vit.ViTConfig(d_model=16, n_heads=2, n_layers=1)).eval()
    images = torch.rand(2, 1, 8, 8)
    before = model(images)
    with torch.no_grad():
        model.positions.embedding.weight[3].add_(torch.randn(16))   # (a constant would vanish in LayerNorm)
    assert not torch.allclose(model(images), before), "position embeddings are not used"
    after_pos = model(images)
    with torch.no_grad():
        model.cls_token.add_(torch.randn(16))
    assert not torch.allclose(model(images), after_pos), "the class token is not used"
    with pytest.raises(ValueError, match="shape"):
        model(torch.rand(2, 1, 6, 6))
    with pytest.raises(ValueError, match="divide"):
        vit.ViT(vit.ViTConfig(image_size=8, patch=3))


def test_attention_rollout_by_hand():
    # two tokens, one head, two layers
    a1 = torch.tensor([[1.0, 0.0], [0.5, 0.5]])
    a2 = torch.tensor([[0.0, 1.0], [0.0, 1.0]])
    w = [a1[None, None], a2[None, None]]
    eye = torch.eye(2)
    r1, r2 = 0.5 * a1 + 0.5 * eye, 0.5 * a2 + 0.5 * eye
    want = r2 @ r1        # = [[0.5, 0.5], [0.0, 1.0]] @ [[1, 0], [0.25, 0.75]]
    got = vit.attention_rollout(w)
    torch.testing.assert_close(got, want[None])
    torch.testing.assert_close(got[0], torch.tensor([[0.625, 0.375], [0.25, 0.75]]))
    # the order matters: the first layer is applied first (rightmost)
    assert not torch.allclose(vit.attention_rollout(w[::-1]), got)
    # without the residual term, the plain product of the attention matrices
    torch.testing.assert_close(vit.attention_rollout(w, residual=False)[0], a2 @ a1)
    # heads are averaged before rolling out
    two_heads = torch.stack([a1, a2])[None]           # (1, 2, 2, 2)
    torch.testing.assert_close(vit.attention_rollout([two_heads])[0], 0.5 * (a1 + a2) / 2 + 0.5 * eye)
    with pytest.raises(ValueError, match="list"):
        vit.attention_rollout([])


def test_rollout_rows_sum_to_one_and_class_token_map_layout():
    torch.manual_seed(0)
    model = vit.ViT(vit.ViTConfig(d_model=16, n_heads=4, n_layers=3)).eval()
    _, weights = model.forward_with_weights(torch.rand(2, 1, 8, 8))
    r = vit.attention_rollout(weights)
    assert r.shape == (2, 17, 17)
    torch.testing.assert_close(r.sum(-1), torch.ones(2, 17))
    m = vit.class_token_map(r, 4)
    assert m.shape == (2, 4, 4)
    assert m[1, 2, 3] == r[1, 0, 1 + 2 * 4 + 3]
    assert vit.class_token_map(weights[0], 4).shape == (2, 4, 4, 4)
    with pytest.raises(ValueError, match="grid"):
        vit.class_token_map(r, 3)


def test_digits_split_is_fixed_stratified_and_disjoint():
    x_train, y_train, x_test, y_test = data.digits()
    assert x_train.shape == (1437, 1, 8, 8) and x_test.shape == (360, 1, 8, 8)
    assert x_train.dtype == torch.float32 and 0 <= float(x_train.min()) and float(x_train.max()) == 1.0
    counts = torch.bincount(y_test, minlength=10)
    assert counts.min() >= 35 and counts.max() <= 37
    again = data.digits()
    assert torch.equal(again[2], x_test) and torch.equal(again[3], y_test)
    other = data.digits(seed=1)
    assert not torch.equal(other[2], x_test)
    # no test image is a training image (the 1797 images are pairwise distinct)
    train_rows = {tuple(r) for r in x_train.flatten(1).tolist()}
    assert not any(tuple(r) in train_rows for r in x_test.flatten(1).tolist())
    with pytest.raises(ValueError, match="n_test"):
        data.digits(n_test=0)


def test_training_a_tiny_vit_on_digits_learns():
    torch.manual_seed(0)
    x_train, y_train, x_test, y_test = data.digits()
    model = vit.ViT(vit.ViTConfig(patch=4, d_model=16, n_heads=2, n_layers=1))
    hist = classify.train_classifier(model, x_train[:512], y_train[:512], classify.classifier_config(512, 3, 64, lr=3e-3),
                                     batch_size=64)
    epoch_loss = hist.epoch_means(classify.batch_sizes(512, 64))
    assert hist.steps == 3 * 8 and len(epoch_loss) == 3 and classify.batch_sizes(100, 64) == [64, 36]
    assert epoch_loss[-1] < epoch_loss[0]
    assert classify.accuracy(model, x_test, y_test) > 0.3       # chance is 0.1
    stopped = classify.train_classifier(vit.ViT(vit.ViTConfig(patch=4, d_model=16, n_heads=2, n_layers=1)), x_train, y_train,
                                        classify.classifier_config(len(x_train), 50, max_seconds=0.0))
    assert stopped.steps == 1
    calls = []

    def augment(images, generator):
        calls.append(images.shape[0])
        return classify.random_shift(images, 1, generator=generator)

    shifted = classify.train_classifier(vit.ViT(vit.ViTConfig(patch=4, d_model=16, n_heads=2, n_layers=1)), x_train[:100], y_train[:100],
                                        classify.classifier_config(100, 2, 50), batch_size=50, augment=augment)
    assert calls == [50, 50, 50, 50] and shifted.steps == 4


def test_small_cnn_shapes():
    assert classify.SmallCNN(width=8)(torch.rand(3, 1, 8, 8)).shape == (3, 10)


def test_random_shift_moves_each_image_within_the_bound():
    images = torch.zeros(200, 1, 6, 6)
    images[:, 0, 2, 3] = 1.0                      # one bright pixel at (2, 3)
    out = classify.random_shift(images, 1, generator=torch.Generator().manual_seed(0))
    assert out.shape == images.shape and (out.sum((1, 2, 3)) == 1).all()
    where = out[:, 0].flatten(1).argmax(1)
    rows, cols = where // 6, where % 6
    assert set(rows.tolist()) == {1, 2, 3} and set(cols.tolist()) == {2, 3, 4}
    edge = torch.zeros(50, 1, 4, 4)
    edge[:, 0, 0, 0] = 1.0                        # a corner pixel can be pushed out
    assert (classify.random_shift(edge, 1, generator=torch.Generator().manual_seed(0)).sum((1, 2, 3)) == 0).any()
    assert classify.random_shift(images, 0) is images
